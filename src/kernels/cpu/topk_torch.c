/* topk_torch.c: torch.topk's selection on the CPU (see topk_torch.h). The algorithm lives
 * in kernels/topk_torch_impl.h, shared with the CUDA backend's indexer. */
#define TT_FN static
#include "kernels/topk_torch_impl.h"

void sp_topk_torch(sp_topk_elem *q, int64_t n, int64_t k) { tt_topk_torch(q, n, k); }

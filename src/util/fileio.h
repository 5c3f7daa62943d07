/* fileio.h: reading and memory-mapping files, and small path helpers.
 * A mapped file is read-only and stays valid (its descriptor open) until
 * sp_mapped_file_close. Only regular files are accepted (no FIFOs or devices). */
#ifndef SP_UTIL_FILEIO_H
#define SP_UTIL_FILEIO_H

#include "specula.h"
#include <stdbool.h>
#include <stddef.h>

typedef struct sp_mapped_file {
    const unsigned char *data;
    size_t n_bytes;
    char *path; /* owned; NULL for an empty (never opened) one */
    int fd;     /* the file, open while the mapping is (sp_mapped_file_read) */
} sp_mapped_file;

sp_status sp_mapped_file_open(const char *path, sp_mapped_file *out, sp_error *err);
void sp_mapped_file_close(sp_mapped_file *f);
/* Copies bytes [off, off + n) of the mapped file into dst with read calls on its open
 * descriptor (the very file that was mapped; a copy that faults in none of its pages). */
sp_status sp_mapped_file_read(const sp_mapped_file *f, size_t off, void *dst, size_t n, sp_error *err);
/* Drops this process's pages of the mapping (after a copy of it was made): the mapping
 * stays valid and a later read faults its page in again from the page cache. */
void sp_mapped_file_release(const sp_mapped_file *f);

/* Reads a whole regular file into a NUL-terminated malloc'd buffer, refusing files
 * larger than max_bytes. */
sp_status sp_read_file(const char *path, size_t max_bytes, char **out, size_t *n_bytes,
                       sp_error *err);

bool sp_file_exists(const char *path);
bool sp_dir_exists(const char *path);

/* Returns malloc'd "dir/name" (or NULL when out of memory). */
char *sp_path_join(const char *dir, const char *name);
/* Returns a pointer to the last path component inside path. */
const char *sp_path_basename(const char *path);

#endif

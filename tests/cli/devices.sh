#!/usr/bin/env bash
# Devices from the command line: --device parsing and refusals, --device cpu, and on a
# machine without a GPU (CI) a clear refusal of --device cuda (never a silent fallback);
# with a GPU, the same commands run there and the bad-input cases refuse with the numbers.
# usage: devices.sh SPECULA FIXTURES
set -u
SPECULA=$1
FIX=$2
M=$FIX/models/llama_mha_bf16
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fails=0
check() { local d=$1; shift; if "$@"; then echo "ok   $d"; else echo "FAIL $d"; fails=$((fails + 1)); fi; }
expect_exit() { # want_code, stderr_needle, command...
    local want=$1 needle=$2; shift 2
    "$@" >"$TMP/out" 2>"$TMP/err"
    local rc=$?
    if [ "$rc" != "$want" ]; then echo "  exit $rc, wanted $want: $*"; cat "$TMP/err"; return 1; fi
    if [ -n "$needle" ] && ! grep -q -- "$needle" "$TMP/err"; then
        echo "  stderr lacks '$needle':"; cat "$TMP/err"; return 1; fi
    return 0
}
G="generate -m $M --tokens 1,2,3 -n 3"
check "--device cpu runs" expect_exit 0 "" $SPECULA $G --device cpu
check "--device auto says where it runs" expect_exit 0 "running on" $SPECULA $G --device auto
check "SPECULA_DEVICE=cpu is the default device" expect_exit 0 "" env SPECULA_DEVICE=cpu $SPECULA $G
check "--device bogus is refused" expect_exit 1 "expected cpu, cuda, cuda:N or auto" $SPECULA $G --device gpu
check "--device cuda:x is refused" expect_exit 1 "expected cpu, cuda, cuda:N or auto" $SPECULA $G --device cuda:x
check "--device cuda:99 is refused" expect_exit 1 "cuda:99" $SPECULA $G --device cuda:99
check "inspect names the device" bash -c "'$SPECULA' inspect -m '$M' --device cpu | grep -q '^device *cpu'"
if "$SPECULA" inspect -m "$M" --device cuda >/dev/null 2>&1; then
    echo "(a GPU is present: checking it)"
    check "cuda: greedy output equals the CPU's" bash -c "[ \"\$('$SPECULA' $G --device cuda)\" = \"\$('$SPECULA' $G --device cpu)\" ]"
    check "cuda: memory refusal names the numbers" expect_exit 1 "MiB is available" env SPECULA_MEM_LIMIT_BYTES=1000 $SPECULA $G --device cuda
    check "cuda: a failed kernel names its op" expect_exit 1 "op matmul failed" env SPECULA_CUDA_FAIL_OP=matmul $SPECULA $G --device cuda
    check "cuda: a draft on the CPU" expect_exit 0 "" $SPECULA $G --device cuda --draft $M --draft-device cpu
else
    check "no GPU: --device cuda is refused, not run on the CPU" expect_exit 1 "CUDA" $SPECULA $G --device cuda
fi
echo "$fails failure(s)"
[ "$fails" = 0 ]

# py_lib.bash - sourced by the Python tests after lib.sh: PY (the Python),
# pyrun (runs a Python command here), PY_CMD (the start of a job's `command:`
# list that runs Python) and PY_JOB_ENV (the env entries such a job needs).
# In a sanitizer build libtroupe expects the ASan runtime, which a Python
# interpreter does not carry: TROUPE_PY_PRELOAD (set by CMake there) is
# preloaded into the Python processes only (not into the agent's launcher,
# which carries its own runtime: hence `env` in PY_CMD rather than the job's
# env), with leak checking off (the interpreter does not free everything at
# exit, which is not libtroupe's).
: "${TROUPE_PY_SRC:?}" "${TROUPE_LIBRARY:?}"
PY=${TROUPE_PYTHON:-/usr/bin/python3}
PY_ASAN="detect_leaks=0:abort_on_error=1"
PY_CMD="$PY"
PY_JOB_ENV="PYTHONPATH: \"$TROUPE_PY_SRC\", TROUPE_LIBRARY: \"$TROUPE_LIBRARY\""
if [ -n "${TROUPE_PY_PRELOAD:-}" ]; then
    PY_CMD="env, \"LD_PRELOAD=$TROUPE_PY_PRELOAD\", \"ASAN_OPTIONS=$PY_ASAN\", $PY"
fi
pyrun() {
    if [ -n "${TROUPE_PY_PRELOAD:-}" ]; then
        LD_PRELOAD=$TROUPE_PY_PRELOAD ASAN_OPTIONS=$PY_ASAN "$@"
    else
        "$@"
    fi
}
# need_torch_gloo: skip the test (77) unless $PY has torch.distributed with
# gloo, the CPU backend these tests run on.
need_torch_gloo() {
    pyrun "$PY" -c "import torch.distributed as d; assert d.is_available() and d.is_gloo_available()" 2>/dev/null ||
        skip_test "$PY has no torch with gloo (scripts/setup.sh installs Debian's python3-torch)"
}

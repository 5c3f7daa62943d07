# serve_lib.sh: start and stop `specula serve` inside a test, on a free loopback port.
#   start_server NAME ARGS...   sets SRV_PID and URL (http://127.0.0.1:PORT); stderr in $TMP/NAME.err
#   stop_server                 SIGTERM, waits, sets SRV_RC
start_server() {
    local name=$1; shift
    "$SPECULA" serve --port 0 "$@" 2>"$TMP/$name.err" &
    SRV_PID=$!
    SRV_ERR=$TMP/$name.err
    for _ in $(seq 1 300); do
        if grep -q "^listening on http://" "$SRV_ERR"; then
            URL=$(grep -o "^listening on http://[^ ]*" "$SRV_ERR" | sed 's/^listening on //')
            return 0
        fi
        kill -0 "$SRV_PID" 2>/dev/null || break
        sleep 0.1
    done
    echo "server did not start:"; cat "$SRV_ERR"
    return 1
}
stop_server() {
    kill -TERM "$SRV_PID" 2>/dev/null
    wait "$SRV_PID"
    SRV_RC=$?
}

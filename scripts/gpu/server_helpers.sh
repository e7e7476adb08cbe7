# Sourced by the serving scripts in this folder: start-stop helpers for one server process group.
# Needs say() and SERVER_PID from the caller; sets a trap that stops the server on exit.
stop_server() {  # SIGINT to the server's process group, then SIGKILL if it lingers
  [ -n "$SERVER_PID" ] || return 0
  kill -INT -- "-$SERVER_PID" 2>/dev/null || kill -INT "$SERVER_PID" 2>/dev/null
  for _ in $(seq 1 40); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 0.5; done
  kill -KILL -- "-$SERVER_PID" 2>/dev/null || kill -KILL "$SERVER_PID" 2>/dev/null
  wait "$SERVER_PID" 2>/dev/null
  SERVER_PID=""
}
trap stop_server EXIT

wait_healthy() {  # PORT TIMEOUT_S LOGFILE: poll /health until it answers 200, the server dies or time runs out
  local port=$1 limit=$2 logfile=$3 start=$SECONDS
  while (( SECONDS - start < limit )); do
    if ! kill -0 "$SERVER_PID" 2>/dev/null; then say "server exited early; its last lines:"; tail -25 "$logfile"; return 1; fi
    if python3 - "$port" <<'PY' 2>/dev/null
import sys, urllib.request
opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
sys.exit(0 if opener.open(f"http://127.0.0.1:{sys.argv[1]}/health", timeout=2).status == 200 else 1)
PY
    then say "healthy on port $port after $((SECONDS - start)) s"; return 0; fi
    sleep 2
  done
  say "no answer on /health within ${limit}s; the last lines of $logfile:"; tail -25 "$logfile"; return 1
}


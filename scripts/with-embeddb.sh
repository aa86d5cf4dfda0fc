#!/usr/bin/env bash
# with-embeddb.sh CMD [ARGS...]: run CMD with MONGODB_URI pointing at a server.
#
# When MONGODB_URI is already set, CMD simply runs against it. Otherwise this
# builds the embedded FerretDB server (embeddb/cmd/embeddb), starts it with its
# data in a temporary directory, exports its URI (the first line it prints),
# runs CMD, then stops the server by closing its standard input and removes
# the directory. CMD's exit status is the script's.
set -euo pipefail

if [ $# -eq 0 ]; then
	echo "usage: $0 CMD [ARGS...]" >&2
	exit 2
fi
if [ -n "${MONGODB_URI:-}" ]; then
	exec "$@"
fi

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
tmp="$(mktemp -d "${TMPDIR:-/tmp}/embeddb.XXXXXX")"
pid=""
cleanup() {
	exec 3>&- # EOF on the server's stdin: it stops
	if [ -n "$pid" ]; then
		for _ in $(seq 1 300); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
		if kill -0 "$pid" 2>/dev/null; then
			echo "with-embeddb: server did not stop within 30s; killing it" >&2
			kill "$pid" 2>/dev/null || true
		fi
		wait "$pid" 2>/dev/null || true
	fi
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

echo "== building the embedded server (embeddb)" >&2
(cd "$root/embeddb" && "${GO:-go}" build -o "$tmp/embeddb" ./cmd/embeddb)

mkfifo "$tmp/stdin"
"$tmp/embeddb" -dir "$tmp/data" -stdin <"$tmp/stdin" >"$tmp/stdout" 2>"$tmp/server.log" &
pid=$!
exec 3>"$tmp/stdin" # hold the server's stdin open until cleanup

uri=""
for _ in $(seq 1 600); do
	if [ -s "$tmp/stdout" ]; then
		IFS= read -r uri <"$tmp/stdout" || true
		[ -n "$uri" ] && break
	fi
	if ! kill -0 "$pid" 2>/dev/null; then
		echo "with-embeddb: the server exited:" >&2
		cat "$tmp/server.log" >&2
		exit 1
	fi
	sleep 0.1
done
if [ -z "$uri" ]; then
	echo "with-embeddb: the server printed no URI within 60s" >&2
	exit 1
fi
echo "== embedded server at $uri" >&2

status=0
MONGODB_URI="$uri" "$@" || status=$?
exit "$status"

#!/usr/bin/env bash
# Scale-out recipe (docs/serving.md): two `loom serve` replicas behind Debian's nginx on loopback,
# with prefix-affinity routing and retries, and a demonstration of both:
#   1. affinity: requests of one session (X-Session-Id header), and requests without the header
#      that share a system prompt (hashed on the body's first 256 bytes), land on the same
#      replica, so its prefix cache stays hot (cached_tokens > 0 from the second request on);
#   2. failover: the replica a session maps to is killed; its next request is retried on the
#      other replica by nginx and succeeds.
#
# usage: scripts/scale-out.sh [MODEL=../shared/models/stories260K.gguf]     (exit 0 = both shown)
# Needs nginx (apt-get install nginx; it is not started as a service here; LOOM_NGINX=PATH picks
# another binary; not NGINX, which nginx itself reads) and curl.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
LOOM=${LOOM:-$ROOT/build/bin/loom}
MODEL=${1:-${LOOM_SHARED:-$ROOT/../shared}/models/stories260K.gguf}
NGINX=${LOOM_NGINX:-$(command -v nginx || echo /usr/sbin/nginx)}
[[ -x "$NGINX" ]] || { echo "scale-out: nginx not found (apt-get install nginx)" >&2; exit 1; }
[[ -x "$LOOM" ]] || { echo "scale-out: $LOOM not built" >&2; exit 1; }
[[ -f "$MODEL" ]] || { echo "scale-out: model not found: $MODEL" >&2; exit 1; }

work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  [[ -f "$work/nginx.pid" ]] && kill "$(cat "$work/nginx.pid")" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }

# Two replicas.
ports=()
for i in 1 2; do
  p=$(free_port)
  "$LOOM" serve -m "$MODEL" --host 127.0.0.1 --port "$p" -np 2 -c 2048 -t 1 --alias "replica$i" 2>"$work/replica$i.log" &
  pids+=($!)
  ports+=("$p")
done
for p in "${ports[@]}"; do
  for _ in $(seq 100); do curl -sf -m 5 "http://127.0.0.1:$p/health" >/dev/null && break; sleep 0.1; done
done

# nginx: consistent hash on the session header, else on the first 256 bytes of the body (a
# system prompt's start); a replica that refuses connections or answers 502/503 is skipped and
# the request retried on the next one (POST included: nothing was sent to the client yet).
front=$(free_port)
cat > "$work/nginx.conf" <<EOF
daemon on;
pid $work/nginx.pid;
error_log $work/nginx-error.log warn;
worker_processes 1;
events { worker_connections 256; }
http {
  access_log $work/nginx-access.log;
  client_body_temp_path $work/body;
  proxy_temp_path $work/proxy;
  fastcgi_temp_path $work/fastcgi;
  uwsgi_temp_path $work/uwsgi;
  scgi_temp_path $work/scgi;
  map \$request_body \$loom_body_prefix {
    "~^(?<head>[\\s\\S]{1,256})" \$head;
    default "";
  }
  map \$http_x_session_id \$loom_affinity {
    ""      \$loom_body_prefix;
    default \$http_x_session_id;
  }
  map \$request_body \$loom_model {      # router-mode replicas: one model's requests stay together
    '~"model"\\s*:\\s*"(?<m>[^"]{1,200})"' \$m;
    default "";
  }
  upstream loom {
    hash \$loom_model\$loom_affinity consistent;
    server 127.0.0.1:${ports[0]} max_fails=1 fail_timeout=10s;
    server 127.0.0.1:${ports[1]} max_fails=1 fail_timeout=10s;
    keepalive 16;
  }
  server {
    listen 127.0.0.1:$front;
    client_max_body_size 8m;
    client_body_buffer_size 1m;          # bodies in memory: \$request_body is then set
    client_body_in_single_buffer on;
    location / {
      proxy_pass http://loom;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;               # SSE streams pass through at once
      proxy_read_timeout 600s;
      proxy_next_upstream error timeout http_502 http_503 non_idempotent;
      proxy_next_upstream_tries 2;
      add_header X-Loom-Replica \$upstream_addr always;
    }
  }
}
EOF
"$NGINX" -p "$work" -c "$work/nginx.conf" -e "$work/nginx-error.log"
for _ in $(seq 50); do curl -sf -m 5 "http://127.0.0.1:$front/health" >/dev/null && break; sleep 0.1; done

# A system prompt longer than the 256 bytes hashed (with its JSON wrapper): requests that share it
# hash alike whatever their question.
SYSTEM="Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her friends. One day, she saw a big red ball under a tall tree. She ran to get it, but a small dog got there first. The dog wagged its tail and looked at Lily with big brown eyes. Lily smiled and threw the ball far away."
ask() {  # ask SESSION QUESTION -> "replica cached_tokens status"
  local hdr=()
  [[ -n "$1" ]] && hdr=(-H "X-Session-Id: $1")
  local out
  out=$(curl -s -m 60 -D "$work/h" "${hdr[@]}" "http://127.0.0.1:$front/v1/chat/completions" \
    -H 'content-type: application/json' \
    -d "{\"messages\":[{\"role\":\"system\",\"content\":\"$SYSTEM\"},{\"role\":\"user\",\"content\":\"$2\"}],\"max_tokens\":8,\"temperature\":0}")
  local replica status cached
  replica=$(grep -i '^x-loom-replica' "$work/h" | tr -d '\r' | awk '{print $NF}')
  status=$(head -1 "$work/h" | awk '{print $2}')
  cached=$(printf '%s' "$out" | python3 -c 'import json,sys; print(json.load(sys.stdin)["usage"]["prompt_tokens_details"]["cached_tokens"])' 2>/dev/null || echo -)
  echo "$replica $cached $status"
}

ok=1
echo "== affinity: one session, four requests"
first=""
for q in "Who was Lily?" "Where did she play?" "With whom?" "What happened next?"; do
  read -r rep cached status <<<"$(ask session-42 "$q")"
  echo "  $q -> $rep (HTTP $status, cached_tokens $cached)"
  [[ -z "$first" ]] && first=$rep
  [[ "$rep" == "$first" ]] || ok=0
done
echo "== affinity without a session header: the same system prompt hashes to one replica"
nofirst=""
i=0
for q in "Tell me more." "And then?" "Why?"; do
  read -r rep cached status <<<"$(ask "" "$q")"
  echo "  $q -> $rep (HTTP $status, cached_tokens $cached)"
  [[ -z "$nofirst" ]] && nofirst=$rep
  [[ "$rep" == "$nofirst" ]] || ok=0
  [[ $i -gt 0 && "$cached" == "-" ]] && ok=0
  [[ $i -gt 0 && "$cached" != "-" && "$cached" -le 0 ]] && ok=0
  i=$((i + 1))
done

echo "== failover: kill the replica of session-42 ($first), ask again"
victim=0
[[ "$first" == "127.0.0.1:${ports[1]}" ]] && victim=1
kill "${pids[$victim]}"
wait "${pids[$victim]}" 2>/dev/null || true
read -r rep cached status <<<"$(ask session-42 "Are you still there?")"
echo "  -> $rep (HTTP $status)"
[[ "$status" == "200" && "$rep" != "$first" ]] || ok=0
read -r rep cached status <<<"$(ask session-42 "And now?")"
echo "  -> $rep (HTTP $status, cached_tokens $cached: the survivor's cache warms up again)"
[[ "$status" == "200" ]] || ok=0

if [[ $ok == 1 ]]; then
  echo "scale-out: affinity and failover shown"
else
  echo "scale-out: FAILED (see above; nginx log: $(tail -3 "$work/nginx-error.log" 2>/dev/null))" >&2
  exit 1
fi

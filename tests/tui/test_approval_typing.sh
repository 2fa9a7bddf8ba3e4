#!/usr/bin/env bash
# A key typed just before the approval question appears does not answer it: someone typing
# (or queueing) a message while the model answers goes on typing when "run now?" comes up, and
# a "y" of theirs must not run the tool (review of issue 24's queue). A scripted server
# (tests/remote/server.py) sends the call of `now` 1.5 s after the request, while y is typed
# every 50 ms from before the question until after it: every y stays typing (the call still
# waits); a y after a pause answers it. A y right after Enter is an answer (Enter ends a word:
# tui_approval and tui_resize answer so).
. "$(dirname "$0")/lib.sh"
mkfifo "$TMP/keep"
python3 tests/remote/server.py --lifetime 120 < "$TMP/keep" > "$TMP/port" &
exec 8> "$TMP/keep"
for _ in $(seq 100); do grep -q PORT "$TMP/port" 2>/dev/null && break; sleep 0.05; done
url=http://127.0.0.1:$(awk '/PORT/ {print $2}' "$TMP/port")
python3 - "$TMP" "$url" <<'PY'
import json, sys, urllib.request
tmp, url = sys.argv[1], sys.argv[2]
def event(delta, finish=None):
    return "data: " + json.dumps({"id": "c1", "object": "chat.completion.chunk", "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}) + "\n\n"
open(tmp + "/call.sse", "w").write(event({"role": "assistant", "content": ""}) + event({"tool_calls": [{"index": 0,
    "id": "call_1", "type": "function", "function": {"name": "now", "arguments": "{}"}}]})
    + event({}, "tool_calls") + "data: [DONE]\n\n")
open(tmp + "/answer.sse", "w").write(event({"role": "assistant", "content": "It is now."}) + event({}, "stop")
    + "data: [DONE]\n\n")
for step in ({"fixture": tmp + "/call.sse", "delay": 1.5}, {"fixture": tmp + "/answer.sse"}):
    urllib.request.urlopen(url + "/__next", json.dumps(step).encode()).read()
PY
start main 100 30 NO_PROXY='*' no_proxy='*' -- --server "$url" --server-model m --tools app/demo/kimi-demo/tools.json
wait_ready 60
tm send-keys -t "$PANE" 'What time is it?' Enter
sleep 0.3   # text right behind an Enter is a paste (enter_in_paste): a typist pauses
asked=0
for _ in $(seq 1 200); do
    tm send-keys -t "$PANE" -l y
    if screen | grep -Eq '^─ (run now\?|answer y, a or n)'; then asked=1; break; fi
    sleep 0.05
done
[ "$asked" = 1 ] || fail "the approval question never came"
for _ in 1 2 3 4; do tm send-keys -t "$PANE" -l y; sleep 0.05; done
sleep 1
screen | grep -q '┌ now .*waiting for approval' || fail "a y typed with the question's arrival answered it"
tm send-keys -t "$PANE" y
wait_for '┌ now +call_1 ─ done' 60
wait_for 'It is now\.' 60
tm send-keys -t "$PANE" C-c C-d
check_sane main
echo PASS

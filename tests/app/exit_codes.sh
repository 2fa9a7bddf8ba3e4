#!/usr/bin/env bash
# kimi-chat's exit codes and one-line errors (docs/UI.md): 0 ok, 1 a script line failed, 2
# usage, 3 model or engine failure, 130 interrupted (the session so far saved); a denied tool
# call in a script; the plain REPL on a pipe; --prompt writes only the answer to stdout.
#   exit_codes.sh KIMI_CHAT
set -uo pipefail
kimi_chat=$1
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export XDG_DATA_HOME=$tmp/data XDG_STATE_HOME=$tmp/state XDG_CONFIG_HOME=$tmp/config
failed=0

# expect CODE PATTERN -- ARGS...: run kimi-chat, check its exit code and that stderr has PATTERN
expect() {
    local code=$1 pattern=$2
    shift 3
    "$kimi_chat" "$@" > "$tmp/out" 2> "$tmp/err" < /dev/null
    local got=$?
    if [[ $got -ne $code ]] || ! grep -qE -- "$pattern" "$tmp/err"; then
        echo "FAIL: kimi-chat $* -> exit $got (want $code), stderr:"; cat "$tmp/err"
        failed=$((failed + 1))
    else
        echo "ok: exit $code: $(grep -E -- "$pattern" "$tmp/err" | head -n 1)"
    fi
}

expect 2 '^kimi-chat: --frobnicate: unknown flag' -- --frobnicate
# a theme that does not exist: a usage error naming the themes there are, one line, before the
# model loads (nothing about loading on stderr)
expect 2 "^kimi-chat: --theme neon: theme 'neon' not found \(themes: default, high-contrast, light, mono\)$" -- --theme neon --prompt hi
[[ $(wc -l < "$tmp/err") -eq 1 ]] || { echo "FAIL: --theme neon: more than one line on stderr"; cat "$tmp/err"; failed=$((failed + 1)); }
"$kimi_chat" --version | grep -qx "kimi-chat [0-9]*\.[0-9]*\.[0-9]*" ||
    { echo "FAIL: --version says '$("$kimi_chat" --version)'"; failed=$((failed + 1)); }
expect 2 '^kimi-chat: --tp 0: must be 1..8' -- --tp 0 --prompt hi
# a cache format that does not exist: one line, before the model loads (issue 22)
expect 2 '^kimi-chat: --kv-cache fp4: must be fp16 or fp8$' -- --kv-cache fp4 --prompt hi
[[ $(wc -l < "$tmp/err") -eq 1 ]] || { echo "FAIL: --kv-cache fp4: more than one line on stderr"; cat "$tmp/err"; failed=$((failed + 1)); }
expect 2 '^kimi-chat: --cpu-weights thp: must be huge-pages or mmap$' -- --cpu-weights thp --prompt hi
[[ $(wc -l < "$tmp/err") -eq 1 ]] || { echo "FAIL: --cpu-weights thp: more than one line on stderr"; cat "$tmp/err"; failed=$((failed + 1)); }
expect 3 "^kimi-chat: --model $tmp/nowhere: no such folder" -- --model "$tmp/nowhere" --prompt hi
cp -r "$root/app/demo/kimi-demo" "$tmp/broken" && chmod -R u+w "$tmp/broken"
truncate -s 1000 "$tmp/broken/model-00002-of-00003.safetensors"
expect 3 "model-00002-of-00003.safetensors" -- --model "$tmp/broken" --prompt hi
expect 2 "^kimi-chat: --script: .*missing.kc" -- --script "$tmp/missing.kc"
expect 2 "^kimi-chat: --load $tmp: is a folder" -- --load "$tmp" --prompt hi
expect 2 "^kimi-chat: $tmp: cannot read: it is a folder" -- --tools "$tmp" --prompt hi
printf 'Hello! Who are you?\n/frobnicate now\n' > "$tmp/bad.kc"
expect 1 "^$tmp/bad.kc:2: unknown command /frobnicate" -- --script "$tmp/bad.kc"
# every bad line, each as file:line, and nothing else (the model is not loaded)
printf 'Hello!\n/frobnicate now\n/set temperature 150\n/expect sometimes x\n/expect nothing\nOk\n' > "$tmp/bad2.kc"
expect 1 "^$tmp/bad2.kc:4: /expect sometimes" -- --script "$tmp/bad2.kc"
grep -q "^$tmp/bad2.kc:5: /expect nothing" "$tmp/err" || { echo "FAIL: bad2.kc: line 5 not reported"; cat "$tmp/err"; failed=$((failed + 1)); }
[[ $(wc -l < "$tmp/err") -eq 2 ]] || { echo "FAIL: bad2.kc: not two lines on stderr"; cat "$tmp/err"; failed=$((failed + 1)); }
printf 'Hello!\n/frobnicate now\n/set temperature 150\n' > "$tmp/bad3.kc"
expect 1 "^$tmp/bad3.kc:2: unknown command /frobnicate" -- --script "$tmp/bad3.kc"
grep -q "^$tmp/bad3.kc:3: /set temperature 150: must be a number in \[0, 100\]" "$tmp/err" || { echo "FAIL: bad3.kc: line 3 not reported"; cat "$tmp/err"; failed=$((failed + 1)); }
[[ $(wc -l < "$tmp/err") -eq 2 ]] || { echo "FAIL: bad3.kc: not two lines on stderr"; cat "$tmp/err"; failed=$((failed + 1)); }
printf 'Hello! Who are you?\n/expect contains banana\nWhat time is it?\n' > "$tmp/expect.kc"
expect 1 "^$tmp/expect.kc:2: /expect contains \"banana\"" -- --script "$tmp/expect.kc" --temperature 0
grep -q "What time" "$tmp/out" && { echo "FAIL: the script went on after a failed /expect"; failed=$((failed + 1)); }
expect 1 "expect.kc:2: /expect contains" -- --script "$tmp/expect.kc" --temperature 0 --keep-going --no-save
grep -q "you> What time" "$tmp/out" || { echo "FAIL: --keep-going did not go on"; failed=$((failed + 1)); }
# A turn larger than the whole context: the model's failure (3), named, not a bad line (1).
printf 'Hello! Who are you?\n' > "$tmp/hello.kc"
expect 3 "^$tmp/hello.kc:1: the conversation is [0-9]+ tokens, more than the 50-token context" -- --script "$tmp/hello.kc" --max-context 50 --no-save
# A conversation exactly as long as the context still gets its first answer token (it takes no
# cache position: engine_positions_needed), then stops at the full context; one token longer is refused.
n=$(grep -oE "the conversation is [0-9]+ tokens" "$tmp/err" | grep -oE "[0-9]+")
expect 3 "^\[the context is full \($n tokens\)" -- --script "$tmp/hello.kc" --max-context "$n" --no-save --temperature 0
expect 3 "^$tmp/hello.kc:1: the conversation is $n tokens, more than the $((n - 1))-token context" -- --script "$tmp/hello.kc" --max-context "$((n - 1))" --no-save
# --resume with saving off (--no-save, or a sessions folder that cannot be made) reads the
# newest session and writes nothing; with none there it is a usage error, not a crash.
rm -rf "$tmp/data"
expect 2 "^kimi-chat: --resume: no saved session in $tmp/data/kimi-chat/sessions" -- --resume --no-save --prompt hi
touch "$tmp/a-file"
XDG_DATA_HOME=$tmp/a-file expect 2 "^kimi-chat: $tmp/a-file/kimi-chat/sessions: cannot list the sessions" -- --resume --prompt hi
rm -rf "$tmp/data"
"$kimi_chat" --prompt "Hello! Who are you?" --temperature 0 > /dev/null 2>&1 < /dev/null
# a one-shot run saves (so that --resume can follow it up) under a name that says so
ls "$tmp/data/kimi-chat/sessions" | grep -qE '^prompt-[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9-]+\.json$' ||
    { echo "FAIL: the --prompt run's session is not named prompt-*.json"; ls "$tmp/data/kimi-chat/sessions"; failed=$((failed + 1)); }
before=$(cat "$tmp/data/kimi-chat/sessions/"*.json | md5sum)
expect 0 "^resumed $tmp/data/kimi-chat/sessions/.*\(2 messages\)" -- --resume --no-save --prompt "What time is it?" --temperature 0
[[ $(ls "$tmp/data/kimi-chat/sessions" | wc -l) -eq 1 && $(cat "$tmp/data/kimi-chat/sessions/"*.json | md5sum) == "$before" ]] ||
    { echo "FAIL: --resume --no-save wrote to the sessions folder"; ls -l "$tmp/data/kimi-chat/sessions"; failed=$((failed + 1)); }
echo '{"meta": {"format": "kimi-chat-session", "version": 99}, "messages": []}' > "$tmp/newer.json"
expect 2 "newer.json: session format version 99 is newer" -- --load "$tmp/newer.json" --prompt hi
# The --load file is read and checked before the model loads (minutes with the real checkpoint):
# its error comes first, with a model that would fail to load.
expect 2 "newer.json: session format version 99 is newer" -- --load "$tmp/newer.json" --model "$tmp/broken" --prompt hi
# A file with no messages is an error naming it (before the model loads), not a silent new chat.
echo '[]' > "$tmp/empty.json"
expect 2 "^kimi-chat: $tmp/empty.json: no messages to load \(an empty conversation\)$" -- --load "$tmp/empty.json" --model "$tmp/broken" --prompt hi
# An error quoting a file (the JSON parser's "near '...'") reaches the terminal without its
# control sequences: C1 CSI (U+009B) and C0 controls become spaces in the last line on stderr.
printf '[{"role": "user", "content": "a\xc2\x9b2J\x1b[31mX\x01"}]' > "$tmp/controls.json"
expect 2 "controls.json:1:.*invalid JSON: control character 0x1b near '\"a 2J'$" -- --load "$tmp/controls.json" --prompt hi
LC_ALL=C grep -q $'[\x01-\x08\x0b-\x1f\x7f]\|\xc2[\x80-\x9f]' "$tmp/err" &&
    { echo "FAIL: a control character from the file reached stderr"; od -c "$tmp/err"; failed=$((failed + 1)); }

# A call the script did not allow is denied (nobody to ask), and the model is told what would allow it.
printf '/set temperature 0\nWhat time is it?\n/export json %s\n' "$tmp/denied.json" > "$tmp/deny.kc"
expect 0 "now: denied" -- --script "$tmp/deny.kc"
python3 -c "
import json, sys
m = json.load(open('$tmp/denied.json'))['messages']
sys.exit(0 if m[2]['role'] == 'tool' and '--allow-tools now would allow it' in m[2]['content'] else 1)" ||
    { echo "FAIL: the denied call's result"; failed=$((failed + 1)); }

# --prompt: the answer alone on stdout; the REPL on a pipe reads lines until end of input.
expect 0 "" -- --prompt "Hello! Who are you?" --temperature 0 --hide-reasoning
grep -q "demo model" "$tmp/out" && ! grep -q "you>" "$tmp/out" ||
    { echo "FAIL: --prompt stdout:"; cat "$tmp/out"; failed=$((failed + 1)); }
printf 'Hello! Who are you?\n/stats\n' | "$kimi_chat" --plain --temperature 0 > "$tmp/out" 2> "$tmp/err"
[[ $? -eq 0 ]] && grep -q "demo model" "$tmp/out" && grep -q "last answer: prompt" "$tmp/err" ||
    { echo "FAIL: plain REPL on a pipe"; cat "$tmp/out" "$tmp/err"; failed=$((failed + 1)); }

# An answer that cannot be written (a full disk, a closed stdout) is not a success; the session
# is saved all the same. A reader that stops early (| head) is no failure.
rm -rf "$tmp/data"
"$kimi_chat" --prompt "Hello! Who are you?" --temperature 0 < /dev/null > /dev/full 2> "$tmp/err"
code=$?
[[ $code -eq 2 ]] && grep -q "^kimi-chat: standard output: cannot write the answer: No space left on device" "$tmp/err" &&
    [[ -n $(ls "$tmp/data/kimi-chat/sessions/"*.json 2>/dev/null) ]] ||
    { echo "FAIL: --prompt > /dev/full: exit $code"; cat "$tmp/err"; failed=$((failed + 1)); }
"$kimi_chat" --script "$tmp/hello.kc" --temperature 0 --no-save < /dev/null >&- 2> "$tmp/err"
code=$?
[[ $code -eq 2 ]] && grep -q "^kimi-chat: standard output: cannot write the answer: Bad file descriptor" "$tmp/err" ||
    { echo "FAIL: --script with stdout closed: exit $code"; cat "$tmp/err"; failed=$((failed + 1)); }
"$kimi_chat" --prompt "Hello! Who are you?" --temperature 0 --no-save < /dev/null 2> "$tmp/err" | head -c 1 > /dev/null
code=${PIPESTATUS[0]}
[[ $code -eq 0 ]] || { echo "FAIL: --prompt | head: exit $code"; cat "$tmp/err"; failed=$((failed + 1)); }

# The REPL on a pipe cannot ask (issue 18: the next line was taken as the y/a/n answer): the call
# is not run, the note says what would allow it, and the next line is the next message.
rm -rf "$tmp/data"
printf 'What time is it?\ny\n' | "$kimi_chat" --plain --temperature 0 > "$tmp/out" 2> "$tmp/err"
saved=$(ls "$tmp/data/kimi-chat/sessions/"*.json 2>/dev/null | head -n 1)
if [[ -z "$saved" ]] || ! grep -q "← now: denied" "$tmp/err" || ! grep -qF -- "--allow-tools now would allow it" "$tmp/err" ||
    grep -q "run now?" "$tmp/err" ||
    ! python3 -c "import json, sys; sys.exit(not any(m['role'] == 'user' and m['content'] == 'y' for m in json.load(open('$saved'))['messages']))"; then
    echo "FAIL: no approval on a pipe:"; cat "$tmp/err"; failed=$((failed + 1))
else
    echo "ok: on a pipe the call is not asked about and the next line is a message"
fi

# A NUL byte in a line the REPL reads from a pipe is kept, not the end of the message.
rm -rf "$tmp/data"
printf 'Hello!\0 Who are you?\n' | "$kimi_chat" --plain --temperature 0 > "$tmp/out" 2> "$tmp/err"
saved=$(ls "$tmp/data/kimi-chat/sessions/"*.json 2>/dev/null | head -n 1)
[[ -n "$saved" ]] && python3 -c "
import json, sys
sys.exit(0 if json.load(open('$saved'))['messages'][0]['content'] == 'Hello!\0 Who are you?' else 1)" ||
    { echo "FAIL: a NUL byte on the REPL's input"; cat "$saved" "$tmp/err"; failed=$((failed + 1)); }

# The input ends after a line continued with '\': the message is sent, not dropped.
rm -rf "$tmp/data"
printf 'Hello! \\\nWho are you? \\\n' | "$kimi_chat" --plain --temperature 0 > "$tmp/out" 2> "$tmp/err"
saved=$(ls "$tmp/data/kimi-chat/sessions/"*.json 2>/dev/null | head -n 1)
[[ -n "$saved" ]] && python3 -c "
import json, sys
sys.exit(0 if json.load(open('$saved'))['messages'][0]['content'] == 'Hello! \nWho are you? ' else 1)" ||
    { echo "FAIL: a continued last line"; cat "$saved" "$tmp/err"; failed=$((failed + 1)); }

# SIGINT during a script: exit 130 and the session so far is saved.
rm -rf "$tmp/data"
{ echo "/set temperature 0"; for i in $(seq 40); do echo "What time is it?"; done; } > "$tmp/long.kc"
"$kimi_chat" --script "$tmp/long.kc" --allow-tools all > "$tmp/out" 2> "$tmp/err" &
pid=$!
# Two turns done (the third echoed) before the signal; a slow sanitizer build gets two minutes.
for _ in $(seq 1200); do
    [[ $(grep -c "^you>" "$tmp/out" 2>/dev/null) -ge 3 ]] && break
    sleep 0.1
done
kill -INT $pid
wait $pid
code=$?
saved=$(ls "$tmp/data/kimi-chat/sessions/"*.json 2>/dev/null | head -n 1)
if [[ $code -ne 130 || -z "$saved" ]]; then
    echo "FAIL: SIGINT during a script: exit $code, saved '$saved'"; failed=$((failed + 1))
else
    n=$(python3 -c "import json; print(len(json.load(open('$saved'))['messages']))")
    if [[ $n -lt 8 ]]; then echo "FAIL: SIGINT: only $n messages saved"; failed=$((failed + 1)); fi
    echo "ok: SIGINT -> 130, $n messages saved"
fi

# SIGTERM while a tool runs: exit 130, and the saved session is whole: the call has its
# (cancelled) result, so the session loads and continues (a server refuses an unanswered call).
rm -rf "$tmp/data"
cat > "$tmp/sleepy.json" <<'JSON'
[{"type": "function", "function": {"name": "now", "description": "The time.",
  "parameters": {"type": "object", "properties": {}}}, "exec": {"argv": ["sleep", "30"]}}]
JSON
printf 'What time is it?\n' > "$tmp/now.kc"
: > "$tmp/err"      # not the last test's: the wait below reads it
"$kimi_chat" --script "$tmp/now.kc" --tools "$tmp/sleepy.json" --allow-tools all --temperature 0 > "$tmp/out" 2> "$tmp/err" &
pid=$!
for _ in $(seq 1200); do grep -q "→ now" "$tmp/err" 2>/dev/null && break; sleep 0.05; done
kill -TERM $pid
wait $pid
code=$?
saved=$(ls "$tmp/data/kimi-chat/sessions/"*.json 2>/dev/null | head -n 1)
if [[ $code -ne 130 || -z "$saved" ]] || ! python3 -c "
import json, sys
m = json.load(open('$saved'))['messages']
calls = [c['id'] for x in m for c in (x.get('tool_calls') or [])]
answered = [x.get('tool_call_id') for x in m if x['role'] == 'tool']
sys.exit(0 if calls and calls == answered else 1)"; then
    echo "FAIL: SIGTERM during a tool: exit $code, saved '$saved'"; cat "$saved" 2>/dev/null; failed=$((failed + 1))
else
    echo "ok: SIGTERM during a tool -> 130, every call answered in the saved session"
fi

echo "exit_codes: $failed failed"
[[ $failed -eq 0 ]]

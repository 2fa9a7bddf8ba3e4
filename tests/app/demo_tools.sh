#!/usr/bin/env bash
# The demo model in a scripted session with real tool calls: the time, the word count of a file
# and the listing of a folder this test creates; /expect checks the calls and the answers, then
# check_export.py checks the Markdown and JSON exports (structure, tool output in the answers,
# prefix reuse, the checkpoint's own template via jinja2, ids re-rendered exactly).
#   demo_tools.sh KIMI_CHAT KIMI_PROBE
set -euo pipefail
kimi_chat=$1 kimi_probe=$2
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
tmp=$(mktemp -d)
# The demo model copies paths best when they look like its training data, so the files live
# at one fixed realistic path; a lock keeps two runs (normal and sanitizer builds) apart.
base=/tmp/kimi-chat-tests
exec 9>/tmp/kimi-chat-tests.lock
flock 9
trap 'rm -rf "$base"' EXIT
rm -rf "$base"
mkdir -p "$base/docs/reports" "$base/projects/garden"
echo "one two three four five six seven" > "$base/docs/reports/summary.txt"
touch "$base/projects/garden/notes.txt" "$base/projects/garden/plan.md" "$base/projects/garden/seeds.csv"
mkdir -p "$base/projects/garage" && touch "$base/projects/garage/<|im_end|>.txt" "$base/projects/garage/<think>.md"
export XDG_DATA_HOME=$tmp/data XDG_STATE_HOME=$tmp/state XDG_CONFIG_HOME=$tmp/config
# The demo's tools, with `now` running date for a fixed moment: the tools run for real, and
# the conversation (hence every greedy answer after it) is the same on every run.
python3 - "$root/app/demo/kimi-demo/tools.json" "$tmp/tools.json" <<'PY'
import json, sys
tools = json.load(open(sys.argv[1]))
tools[0]['exec']['argv'] = ['date', '-d', '2024-05-17 09:41:07', '+%Y-%m-%d %H:%M:%S']
json.dump(tools, open(sys.argv[2], 'w'), indent=2)
PY

cat > "$tmp/demo.kc" <<KC
# three questions that need the three tools
/set temperature 0
What time is it?
/expect tool now
/expect contains 2024-05-17 09:41:07
How many words are in $base/docs/reports/summary.txt?
/expect tool word_count
/expect contains 7
List the contents of $base/projects/garden
/expect tool list_dir
/expect contains seeds.csv
"""
Please say <|im_end|> and <think> back to me.
"""
List the contents of $base/projects/garage
/expect tool list_dir
/stats
/export md $tmp/out.md
/export json $tmp/out.json
KC
"$kimi_chat" --script "$tmp/demo.kc" --tools "$tmp/tools.json" --allow-tools all > "$tmp/stdout" 2> "$tmp/stderr" || {
    echo "demo_tools: kimi-chat failed ($?)"; cat "$tmp/stdout" "$tmp/stderr"; exit 1; }
grep -q "^you> What time is it?" "$tmp/stdout"
grep -q "demo model: a 3.6 M-parameter toy" "$tmp/stderr"
grep -q "reused from the cache" "$tmp/stderr"
ls "$tmp/data/kimi-chat/sessions/"*.json > /dev/null
python3 "$here/check_export.py" "$kimi_probe" "$root/app/demo/kimi-demo" "$tmp/out.json" "$tmp/out.md"
echo "demo_tools: ok"

#!/usr/bin/env bash
# Issue 24: Ctrl-F searches the transcript: the separator says "match i/n" (case-insensitive
# unless the query has a capital), n/N move between matches, a match in folded reasoning
# unfolds it, a tool's output is searched too, a query with no match says so and leaves the
# view where it was, Esc ends the search; / in Tab mode starts one too.
. "$(dirname "$0")/lib.sh"
python3 - "$(dirname "$0")/../../app/demo/kimi-demo/tools.json" "$TMP/tools.json" <<'PY'
import json, sys
tools = json.load(open(sys.argv[1]))
tools[0]['exec']['argv'] = ['echo', 'Clock says 09:41:07 Zanzibar']
json.dump(tools, open(sys.argv[2], 'w'))
PY
# Esc alone (an Esc with a key right behind it is Alt-key)
esc() { tm send-keys -t "$PANE" Escape; sleep 0.3; }
start main 100 40 -- --tools "$TMP/tools.json" --allow-tools now
wait_ready
tm send-keys -t "$PANE" 'What time is it?' Enter
wait_for '┌ now +functions\.now:0 ─ done'
wait_ready 20
tm send-keys -t "$PANE" 'Thank you!' Enter
wait_for '^  you  Thank you!'
wait_ready 20

# a word of the first reasoning that is nowhere else (from the saved session)
session=$(ls "$TMP"/data/kimi-chat/sessions/*.json)
word=$(python3 - "$session" <<'PY'
import json, re, sys
msgs = json.load(open(sys.argv[1]))['messages']
others = ' '.join((m.get('content') or '') for m in msgs).lower()
others += ' ' + ' '.join((m.get('reasoning_content') or '') for m in msgs[2:]).lower()
first = next(m['reasoning_content'] for m in msgs if m.get('reasoning_content'))
words = [w for w in re.findall(r'[a-z]{5,}', first.lower()) if w not in others and w not in 'queued search']
print(words[0] if words else '')
PY
)
[ -n "$word" ] || fail "no word only the first reasoning has"
screen | grep -q "$word" && fail "the reasoning word is already shown"

# a match in folded reasoning unfolds it
tm send-keys -t "$PANE" C-f
wait_for '^─ search:  · type to search'
tm send-keys -t "$PANE" "$word"
wait_for "^─ search: $word · match 1/[0-9]+ "
wait_for "$word"
screen | grep -q '▾ thought for' || fail "the reasoning holding the match did not unfold"

# a tool's output; case-insensitive in lower case, exact with a capital
esc; tm send-keys -t "$PANE" C-f zanzibar
wait_for '^─ search: zanzibar · match [0-9]+/[0-9]+ '
esc; tm send-keys -t "$PANE" C-f ZANZIBAR
wait_for '^─ search: ZANZIBAR · no match '
# no match: the view stays where it was
tm send-keys -t "$PANE" Escape C-End
sleep 0.3
before=$(screen | head -n 36)
tm send-keys -t "$PANE" C-f zqxjv
wait_for '^─ search: zqxjv · no match '
[ "$(screen | head -n 36)" = "$before" ] || fail "a search with no match moved the view"

# n / N move between the matches of "time", wrapping around
esc; tm send-keys -t "$PANE" C-f time Enter
wait_for '^─ search: time · match ([0-9]+)/([0-9]+) · n/N next/previous'
total=$(screen | grep -Eo 'match [0-9]+/[0-9]+' | head -n 1 | cut -d/ -f2)
[ "$total" -ge 2 ] || fail "'time' matched $total times"
tm send-keys -t "$PANE" n
wait_for "^─ search: time · match 1/$total "
tm send-keys -t "$PANE" N
wait_for "^─ search: time · match $total/$total "
tm send-keys -t "$PANE" N
wait_for "^─ search: time · match $((total - 1))/$total "
esc
wait_gone '^─ search:'
# / in Tab mode searches too
tm send-keys -t "$PANE" Tab /
wait_for '^─ search:  · type to search'
esc
wait_gone '^─ search:'
tm send-keys -t "$PANE" C-d
wait_file "$TMP/main.exit"
check_sane main
echo PASS

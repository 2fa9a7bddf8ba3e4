#!/usr/bin/env bash
# Issue 24: the transcript search highlights its matches in the text itself (read back from
# tmux with the escape sequences, capture-pane -e): every match in the theme's search_match
# style, the current one ("match i/n") in a different one, a match split by a soft wrap on both
# rows, n moving the current style to the next match, Esc clearing it all; with NO_COLOR (the
# mono theme) matches are reverse and the current one differs still.
. "$(dirname "$0")/lib.sh"

# styles SPEC...: for each SPEC "ROW_REGEX|WORD[|N]", the style (the SGR state, as a sorted
# list) that WORD (its Nth occurrence, from 0) is drawn in on the first screen row matching
# ROW_REGEX; "mixed" when its characters differ, "none" when not found.
styles() {
  screen -e | python3 -c '
import re, sys
rows = []
for line in sys.stdin.read().split("\n"):
    state, cells, i = {}, [], 0
    while i < len(line):
        m = re.match(r"\x1b\[([0-9;:]*)m", line[i:])
        if m:
            codes = [int(c) if c else 0 for c in re.split("[;:]", m.group(1))]
            k = 0
            while k < len(codes):
                c = codes[k]
                if c == 0: state = {}
                elif c in (38, 48, 58):
                    n = 3 if codes[k + 1] == 5 else 5
                    state[c] = tuple(codes[k + 1:k + n]); k += n - 1
                elif c in (39, 49, 59): state.pop(c - 1, None)
                elif 30 <= c <= 37 or 90 <= c <= 97: state[38] = (c,)
                elif 40 <= c <= 47 or 100 <= c <= 107: state[48] = (c,)
                elif c in (22, 23, 24, 25, 27, 28, 29):
                    for off in ((1, 2) if c == 22 else (c - 20,)): state.pop(off, None)
                else: state[c] = ()
                k += 1
            i += m.end()
            continue
        m = re.match(r"\x1b[^a-zA-Z]*[a-zA-Z]", line[i:])
        if m:
            i += m.end()
            continue
        cells.append((line[i], tuple(sorted(state.items())))); i += 1
    rows.append(cells)
for spec in sys.argv[1:]:
    regex, word, nth = (spec.split("|") + ["0"])[:3]
    out = "none"
    for cells in rows:
        text = "".join(c for c, _ in cells)
        starts = [m.start() for m in re.finditer(re.escape(word), text)]
        if re.search(regex, text) and len(starts) > int(nth):
            at = starts[int(nth)]
            got = {s for _, s in cells[at:at + len(word)]}
            out = repr(sorted(got)[0]) if len(got) == 1 else "mixed"
            break
    print(out)
' "$@"
}

esc() { tm send-keys -t "$PANE" Escape; sleep 0.3; }

start main 60 30 --
wait_ready
tm send-keys -t "$PANE" 'a kiwi fruit here' Enter
wait_ready 30
# 53 columns of text: "kiwi" ends the row, "fruit" wraps to the next
tm send-keys -t "$PANE" 'one two three four five six seven eight nine ten kiwi fruit end' Enter
wait_ready 30
wait_for '^.?  you  one two three four five six seven eight nine ten kiwi$'
wait_for '^       fruit end$'

m1='you  a kiwi|kiwi fruit'; plain1='you  a kiwi|here'
m2a='nine ten kiwi$|kiwi'; m2b='^.? +fruit end$|fruit'; plain2='^.? +fruit end$|end'
read_styles() { mapfile -t st < <(styles "$m1" "$plain1" "$m2a" "$m2b" "$plain2"); }
read_styles
[ "${st[0]}" = "${st[1]}" ] || fail "the text is highlighted before any search: ${st[*]}"

tm send-keys -t "$PANE" C-f 'kiwi fruit'
wait_for '^─ search: kiwi fruit · match 2/2 '
sleep 0.3
read_styles
for s in "${st[@]}"; do [ "$s" != none ] && [ "$s" != mixed ] || fail "styles not read: ${st[*]}"; done
match=${st[0]} current=${st[2]}
[ "$match" != "${st[1]}" ] || fail "the first match is not highlighted: ${st[*]}"
[ "$current" != "${st[4]}" ] || fail "the current match is not highlighted: ${st[*]}"
[ "${st[3]}" = "$current" ] || fail "the wrapped part of the current match differs: ${st[*]}"
[ "$current" != "$match" ] || fail "the current match looks like the others: ${st[*]}"

# n: the current style moves to the first match, the wrapped one is an ordinary match
tm send-keys -t "$PANE" Enter n
wait_for '^─ search: kiwi fruit · match 1/2 '
sleep 0.3
read_styles
[ "${st[0]}" = "$current" ] || fail "the new current match is not in the current style: ${st[*]}"
[ "${st[2]}" = "$match" ] && [ "${st[3]}" = "$match" ] || fail "the wrapped match is not an ordinary match now: ${st[*]}"

# Esc ends the search and its highlighting
esc
wait_gone '^─ search:'
sleep 0.3
read_styles
[ "${st[0]}" = "${st[1]}" ] || fail "the highlight stayed after Esc: ${st[*]}"
[ "${st[2]}" = "${st[4]}" ] && [ "${st[3]}" = "${st[4]}" ] || fail "the wrapped highlight stayed after Esc: ${st[*]}"
tm send-keys -t "$PANE" C-d
wait_file "$TMP/main.exit"
check_sane main

# NO_COLOR: the mono theme, attributes only
start mono 60 30 NO_COLOR=1 --
wait_ready
tm send-keys -t "$PANE" 'x kiwi y kiwi z' Enter
wait_ready 30
tm send-keys -t "$PANE" C-f kiwi
wait_for '^─ search: kiwi · match 2/2 '
sleep 0.3
mapfile -t st < <(styles 'you  x kiwi y|kiwi|0' 'you  x kiwi y|kiwi|1')
case "${st[0]}" in *"(7, ())"*) ;; *) fail "no colours: the match is not reverse: ${st[*]}" ;; esac
case "${st[1]}" in *"(7, ())"*) ;; *) fail "no colours: the current match is not reverse: ${st[*]}" ;; esac
[ "${st[0]}" != "${st[1]}" ] || fail "no colours: the current match looks like the others: ${st[*]}"
esc
tm send-keys -t "$PANE" C-d
wait_file "$TMP/mono.exit"
echo PASS

#!/usr/bin/env python3
"""deps_check: every program the test scripts call is installed by tests/install-deps.sh or is
part of Debian's base system, so that the README's test command works on a fresh Debian 12
machine (issue 18: app_remote_script ran curl, which nothing installed).

    deps_check.py REPO_ROOT

Reads the programs install-deps.sh lists (install-deps.sh --programs), finds the commands of
every shell script under tests/ (the first word of each simple command: at a line's start,
after | || && ; ( $( ` and after if/then/do/... and wrappers such as timeout or env; heredoc
bodies and comments skipped; functions the script defines, shell builtins and paths excluded),
and fails naming each program that is in neither list and the script that calls it."""
import os
import re
import subprocess
import sys

# Programs of Debian 12's base system, the Essential and "required" packages every image has
# (bash, coreutils, dash, debianutils, diffutils, dpkg, apt, findutils, grep, gzip, hostname,
# mawk, ncurses-bin, perl-base, sed, tar, util-linux); procps (ps, pkill) is not among them.
BASE = set("""
bash sh dash cat cp mv rm ln ls mkdir rmdir touch chmod chown head tail wc sort uniq cut tr
tee printf echo test true false sleep seq date basename dirname readlink realpath mktemp mkfifo
env nproc id stat du df od dd split md5sum sha256sum cmp diff truncate timeout yes expr tac
paste comm join fold nl fmt numfmt shuf sync whoami uname tty stty nohup nice kill
find xargs grep egrep fgrep sed awk mawk gzip gunzip zcat tar hostname perl which
tput clear ionice setsid flock getopt more kill logger script dpkg apt-get
""".split())

BUILTINS = set("""
if then else elif fi for while until do done case esac in function select time
break continue return exit export local readonly declare typeset unset shift set trap wait
cd pwd pushd popd source . eval exec command builtin type hash alias unalias read mapfile
readarray let printf echo test [ [[ ]] ]] true false : getopts jobs fg bg disown ulimit umask
shopt caller compgen complete enable help history logout suspend times coproc
""".split())

# Not run by the README's test command on a Debian machine: the GPU machine's scripts (the
# CUDA toolkit: nvcc, nvidia-smi) and the tokenizer benchmark against the JavaScript tokenizer
# (node, npm), each run by hand where those are installed.
EXEMPT = {"tests/gpu", "tests/bench/tokenizer"}

WRAPPERS = {"timeout", "env", "exec", "command", "nohup", "nice", "setsid", "xargs", "time", "!", "sudo"}
SEPARATORS = re.compile(r"\|\||&&|[|;&()`{}]|\$\(")
WORD = re.compile(r"^[A-Za-z][A-Za-z0-9_.+-]*$")


def listed_programs(root):
    out = subprocess.run(["bash", os.path.join(root, "tests/install-deps.sh"), "--programs"],
                         check=True, capture_output=True, text=True).stdout
    return set(out.split())


def unquote(text):
    """The script as commands only: heredoc bodies, comments and arithmetic dropped; a quoted
    string becomes the word Q, except that a $( ) inside double quotes stays as its own line
    (it runs a command)."""
    out, i, n, quote, inner = [], 0, len(text), None, []
    pending_heredocs = []
    while i < n:
        c = text[i]
        if quote == "'":
            if c == "'":
                quote = None
            i += 1
        elif quote == '"':
            if c == "\\":
                i += 2
            elif c == '"':
                quote = None
                i += 1
            elif text.startswith("$((", i):
                i = text.find("))", i) + 2 if text.find("))", i) >= 0 else n
            elif text.startswith("$(", i):
                depth, j = 1, i + 2
                while j < n and depth:
                    depth += {"(": 1, ")": -1}.get(text[j], 0)
                    j += 1
                inner.append(text[i + 2:j - 1])
                i = j
            else:
                i += 1
        elif c in "'\"":
            quote = c
            out.append("Q")
            i += 1
        elif c == "\\":
            out.append(text[i:i + 2])
            i += 2
        elif c == "#" and (i == 0 or text[i - 1] in " \t\n;|&("):
            while i < n and text[i] != "\n":
                i += 1
        elif text.startswith("$((", i) or text.startswith("((", i):
            j = text.find("))", i)
            i = j + 2 if j >= 0 else n
        elif text.startswith("<<", i) and not text.startswith("<<<", i):
            m = re.match(r"<<-?\s*['\"]?([A-Za-z_]+)['\"]?", text[i:])
            if m:
                pending_heredocs.append(m.group(1))
                i += m.end()
            else:
                out.append(c)
                i += 1
        elif c == "\n" and pending_heredocs:
            out.append(c)
            i += 1
            for tag in pending_heredocs:    # the bodies, to their closing lines
                while i < n:
                    e = text.find("\n", i)
                    e = n if e < 0 else e
                    line = text[i:e]
                    i = e + 1
                    if line.strip() == tag:
                        break
            pending_heredocs = []
        else:
            out.append(c)
            i += 1
    body = "".join(out)
    return body + "\n" + "\n".join(unquote(x) for x in inner)


def commands(text):
    """(program, line number) for each command of the script text."""
    text = re.sub(r"=\(([^()]|\n)*\)", "=Q", text)                 # array literals
    text = re.sub(r"(?m)^\s*[A-Za-z0-9_|*.-]+\)", "", text)           # case labels
    found = []
    lines, starts = [], []          # logical lines: a backslash-newline continues the line
    for no, line in enumerate(text.split("\n"), 1):
        if lines and lines[-1].endswith("\\"):
            lines[-1] = lines[-1][:-1] + " " + line
        else:
            lines.append(line)
            starts.append(no)
    for no, line in zip(starts, lines):
        for piece in SEPARATORS.split(line):
            words = piece.split()
            while words:
                w = words[0]
                if re.match(r"^[A-Za-z_][A-Za-z0-9_]*(\[.*\])?\+?=", w):
                    words.pop(0)            # an assignment before the command
                elif w in ("if", "then", "else", "elif", "do", "while", "until", "!", "time"):
                    words.pop(0)
                elif w in WRAPPERS:
                    words.pop(0)
                    while words and (words[0].startswith("-") or re.match(r"^[0-9.]+[smh]?$", words[0])
                                     or "=" in words[0]):
                        words.pop(0)        # the wrapper's options, duration, variables
                else:
                    break
            if words and WORD.match(words[0]) and words[0] not in BUILTINS and words[0] != "Q":
                found.append((words[0], no))
    return found


def main():
    root = sys.argv[1]
    listed = listed_programs(root)
    scripts = []
    for d, _, files in os.walk(os.path.join(root, "tests")):
        if os.path.relpath(d, root) in EXEMPT:
            continue
        scripts += [os.path.join(d, f) for f in files if f.endswith(".sh")]
    texts = {path: unquote(open(path, encoding="utf-8", errors="replace").read()) for path in scripts}
    functions = set()   # defined by any test script (lib.sh's are sourced by the others)
    for text in texts.values():
        functions |= set(re.findall(r"(?m)^\s*(?:function\s+)?([A-Za-z_][A-Za-z0-9_-]*)\s*\(\)", text))
    missing = []
    for path in sorted(scripts):
        for program, no in commands(texts[path]):
            if program not in listed and program not in BASE and program not in functions:
                missing.append(f"{os.path.relpath(path, root)}: runs {program}, which "
                               "tests/install-deps.sh does not install (add its package there)")
    for line in missing:
        print(line)
    if missing:
        return 1
    print(f"deps_check: {len(scripts)} scripts; every program they run is installed")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/bin/sh
# Prints the path of a Python 3.12 or later that can create a venv (Django 6 needs one), for the
# Django 6 part of `make test`: pyenv's 3.12.1 first, then any pyenv 3.12+, then python3.12,
# python3.13, python3.14 and python3 on PATH. pyenv's bare shims refuse to run a version that is not
# selected, so each candidate is run once to be sure. With none, one line says what to install.
works() {
    "$1" -c 'import sys, venv, ensurepip; sys.exit(sys.version_info < (3, 12))' >/dev/null 2>&1
}
# pyenv's versions, also when pyenv itself is not on PATH (a shell that never ran its init).
root=$(pyenv root 2>/dev/null) || root=${PYENV_ROOT:-$HOME/.pyenv}
candidates="$root/versions/3.12.1/bin/python $(ls -d "$root"/versions/3.1[2-9]*/bin/python 2>/dev/null)"
for name in python3.12 python3.13 python3.14 python3; do
    found=$(command -v "$name" 2>/dev/null) && candidates="$candidates $found"
done
for candidate in $candidates; do
    if works "$candidate"; then
        echo "$candidate"
        exit 0
    fi
done
echo "make test: the Django 6 tests need Python 3.12 or later with venv, and none was found: install one (pyenv install 3.12.1, or apt-get install python3.12-venv) and run make test again" >&2
exit 1

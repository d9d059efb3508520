#!/usr/bin/env python3
"""A line-copying stdio proxy: starts COMMAND and copies each line from its stdin to the
command's, and from the command's stdout to its own, one thread per direction, nothing else.
The least any proxy in front of an MCP server does; the baseline switchyard's stdio path is
measured against. A benchmark peer.

Usage: line-proxy.py COMMAND [ARGS...]
"""
import subprocess
import sys
import threading


def copy(src, dst, close_after):
    for line in iter(src.readline, b""):
        dst.write(line)
        dst.flush()
    if close_after:
        dst.close()


def main():
    if len(sys.argv) < 2:
        sys.exit("usage: line-proxy.py COMMAND [ARGS...]")
    child = subprocess.Popen(sys.argv[1:], stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0)
    up = threading.Thread(target=copy, args=(sys.stdin.buffer, child.stdin, True), daemon=True)
    up.start()
    copy(child.stdout, sys.stdout.buffer, False)
    sys.exit(child.wait())


if __name__ == "__main__":
    main()

"""The box env: notes read from a mounted fixture, a workdir to write in, and tools that misbehave on purpose.

Speaks agentenv's JSON lines on stdin/stdout (agentenv.engine.envkinds); the standard library only. The same file runs
as a container env (in the image) and as a subprocess env (bench/container_start.py runs both side by side).
"""

import json
import os
import socket
import sys
import time

OBJECT = {"type": "object", "properties": {}}
TOOLS = [
    {
        "name": "read_note",
        "description": "Read the note stored under a key.",
        "parameters": {"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]},
    },
    {
        "name": "write_file",
        "description": "Write a file in the workdir.",
        "parameters": {
            "type": "object",
            "properties": {"path": {"type": "string"}, "text": {"type": "string"}},
            "required": ["path", "text"],
        },
    },
    {
        "name": "whoami",
        "description": "Where the env runs: addresses, writable paths, the environment.",
        "parameters": OBJECT,
    },
    {
        "name": "allocate",
        "description": "Hold this many MiB of memory.",
        "parameters": {"type": "object", "properties": {"mib": {"type": "integer"}}, "required": ["mib"]},
    },
    {"name": "exit", "description": "Exit the program (the env's crash).", "parameters": OBJECT},
    {"name": "nap", "description": "Sleep a second, then answer.", "parameters": OBJECT},
]

notes = {}
held = []
task = {}  # the task this container was set up for (the setup request, sent with setup: true)


def addresses():
    found = []
    try:
        with open("/proc/net/fib_trie") as f:
            lines = f.read().splitlines()
    except OSError:
        return found
    for i, line in enumerate(lines):
        if "/32 host LOCAL" in line and i:
            found.append(lines[i - 1].split()[-1])
    return sorted(set(found))


def writable(path):
    try:
        with open(os.path.join(path, ".probe"), "w") as f:
            f.write("x")
        os.unlink(os.path.join(path, ".probe"))
        return True
    except OSError:
        return False


def call(name, args):
    if name == "read_note":
        if args["key"] not in notes:
            return False, f"no note {args['key']!r}; the keys: {', '.join(sorted(notes))}"
        return True, notes[args["key"]]
    if name == "write_file":
        with open(args["path"], "w") as f:
            f.write(args["text"])
        return True, os.path.abspath(args["path"])
    if name == "whoami":
        paths = ["/", "/etc", "/work", "/tmp", "/data"]
        return True, {
            "addresses": addresses(),
            "writable": {p: writable(p) for p in paths if os.path.isdir(p)},
            "environ": sorted(os.environ),
            "cwd": os.getcwd(),
            "uid": os.getuid(),
            "hostname": socket.gethostname(),
            "task": task.get("id"),
        }
    if name == "allocate":
        held.append(bytearray(args["mib"] * 1024 * 1024))
        return True, len(held)
    if name == "exit":
        print("box_env: exiting on purpose", file=sys.stderr, flush=True)
        os._exit(3)
    if name == "nap":
        time.sleep(1)
        return True, "rested"
    return False, f"unknown tool {name!r}"


def main():
    for line in sys.stdin:
        req = json.loads(line)
        out = {"id": req["id"], "ok": True}
        if req["op"] == "tools":
            out["result"] = TOOLS
        elif req["op"] == "deploy":
            with open(req["config"]["notes"]) as f:
                notes.update(json.load(f))
        elif req["op"] == "setup":
            task.update(req["task"])
        elif req["op"] == "call":
            ok, value = call(req["name"], req.get("args", {}))
            out = {"id": req["id"], "ok": ok, ("result" if ok else "error"): value}
        print(json.dumps(out), flush=True)
        if req["op"] == "teardown":
            return


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Checks the layout CONTRIBUTING.md describes, so that it stays true.

  * no source file of core/, cli/ or gui/ is longer than 600 lines;
  * no function is longer than 80 lines, except the few named in EXCEPTIONS (with why);
  * gui/ holds only main.cpp and CMakeLists.txt at its top: everything else is in a room;
  * every project include names its room ("store/CaptureStore.h", not "CaptureStore.h"),
    and the room exists;
  * the rooms of core/ and those of gui/ include one another without a cycle;
  * gui's rooms include only the rooms below them (GUI_MAY_INCLUDE, as docs/architecture.md
    draws them): a panel never includes a session, a plot never a panel;
  * no room holds more than 25 source files (split it by what its parts do);
  * no two files include one another round a circle: a file is its .h and .cpp together, and
    A -> B when either of A's includes B's header.

Usage: check_layout.py [SOURCE_DIR]; prints each violation and exits 1 when there is one.
"""

import os
import re
import sys

MAX_FILE_LINES = 600
MAX_FUNCTION_LINES = 80
MAX_ROOM_FILES = 25
# (file, first line of the function's signature as written): why it stays long.
EXCEPTIONS = {
    ("core/files/TorchPickle.cpp", "Ref run() {"): "the pickle machine's loop: one case per opcode",
    ("core/files/PickleShape.cpp", "std::string step(unsigned char op) {"): "one case per pickle opcode",
}
CODE_ROOTS = ("core", "cli", "gui")
# gui's rooms and the gui rooms each may include: down the picture in docs/architecture.md
# (window -> panels, dialogs -> plots -> models, widgets; window -> session; state, the values
# sessions publish, below them all): a view (panel, dialog, plot) shows what it is handed and
# runs nothing, so none includes a session. A new room gets its line here.
GUI_MAY_INCLUDE = {
    "window": {"panels", "dialogs", "plots", "models", "widgets", "session", "state"},
    "dialogs": {"plots", "models", "widgets", "state"},
    "panels": {"plots", "models", "widgets", "state"},
    "report": {"plots", "models", "widgets", "state"},
    "plots": {"models", "widgets", "state"},
    "session": {"state"},
    "models": {"widgets", "state"},
    "widgets": {"state"},
    "state": set(),
}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
CONTROL = re.compile(r"^(if|for|while|switch|do|else|catch|return)\b")
DECLARATION = re.compile(r'^(namespace\b|extern "C"|(template\s*<[^>]*>\s*)?(class|struct|enum|union)\b)')


def sources(root, folders):
    for folder in folders:
        for directory, _, names in os.walk(os.path.join(root, folder)):
            for name in sorted(names):
                if name.endswith((".cpp", ".h")):
                    path = os.path.join(directory, name)
                    yield os.path.relpath(path, root), path


def code_only(line):
    """The line without comments, string and character literals (their braces are not code)."""
    line = re.sub(r'"(\\.|[^"\\])*"', '""', line)
    line = re.sub(r"'(\\.|[^'\\])*'", "''", line)
    return re.sub(r"//.*", "", line)


def functions(text):
    """(first line, length, signature) of each function body at namespace or class scope.

    A body starts at a line that opens a brace at namespace or class scope, is not itself a
    namespace, class or control statement, and has a parenthesis in it or in the line before
    (a signature broken over lines); it ends where the brace closes."""
    lines = text.split("\n")
    scopes = []  # depths at which a namespace or class body opened
    depth = 0
    start = None
    in_block_comment = False
    for number, raw in enumerate(lines):
        line = raw
        if in_block_comment:
            if "*/" not in line:
                continue
            line = line.split("*/", 1)[1]
            in_block_comment = False
        line = code_only(line)
        if "/*" in line:
            before, after = line.split("/*", 1)
            if "*/" not in after:
                in_block_comment = True
                line = before
        stripped = line.strip()
        opens, closes = line.count("{"), line.count("}")
        scope_depth = scopes[-1] if scopes else 0
        if (start is None and opens > closes and depth == scope_depth and not stripped.startswith("#")
                and not DECLARATION.match(stripped) and not CONTROL.match(stripped)
                and ("(" in stripped or (number > 0 and "(" in lines[number - 1]))):
            start = (number, depth)
        depth += opens - closes
        if DECLARATION.match(stripped) and opens > closes and not stripped.startswith("enum"):
            scopes.append(depth)
        while scopes and depth < scopes[-1]:
            scopes.pop()
        if start is not None and depth <= start[1]:
            yield start[0] + 1, number - start[0] + 1, lines[start[0]].strip()
            start = None


def check_sizes(root, problems):
    for relative, path in sources(root, CODE_ROOTS):
        with open(path, encoding="utf-8") as f:
            text = f.read()
        count = text.count("\n")
        if count > MAX_FILE_LINES:
            problems.append(f"{relative}: {count} lines, more than {MAX_FILE_LINES}: split it by what its parts do")
        for first, length, signature in functions(text):
            if length > MAX_FUNCTION_LINES and (relative, signature) not in EXCEPTIONS:
                problems.append(f"{relative}:{first}: {signature[:70]} is {length} lines, more than "
                                f"{MAX_FUNCTION_LINES}: give its steps names of their own")


def rooms_of(root):
    rooms = {"cli": "cli"}
    for top in ("core", "gui"):
        for name in os.listdir(os.path.join(root, top)):
            if os.path.isdir(os.path.join(root, top, name)):
                rooms[name] = top
    return rooms


def check_room_sizes(root, problems):
    for room, top in sorted(rooms_of(root).items()):
        folder = os.path.join(root, top) if room == "cli" else os.path.join(root, top, room)
        count = sum(1 for name in os.listdir(folder) if name.endswith((".cpp", ".h")))
        if count > MAX_ROOM_FILES:
            problems.append(f"{os.path.relpath(folder, root)}: {count} source files, more than {MAX_ROOM_FILES}: "
                            f"split it into rooms by what its parts do")


def check_file_circles(root, problems):
    """A file (its .h and .cpp as one) that reaches itself through the project's includes."""
    edges = {}
    for relative, path in sources(root, CODE_ROOTS):
        parts = relative.split(os.sep)
        if parts[0] == "cli" or len(parts) < 3:
            continue  # cli's files name their room "cli/"; gui's main.cpp is included by none
        unit = parts[1] + "/" + os.path.splitext(parts[-1])[0]
        with open(path, encoding="utf-8") as f:
            for line in f:
                match = INCLUDE.match(line)
                if match and "/" in match.group(1) and not match.group(1).endswith(".moc"):
                    other = os.path.splitext(match.group(1))[0]
                    if other != unit:
                        edges.setdefault(unit, set()).add(other)
    for cycle in cycles(edges):
        problems.append("files include one another round a circle: " + " -> ".join(cycle) +
                        ": move what both need into a file below them, or pass it in through an interface")


def check_includes(root, problems):
    rooms = rooms_of(root)
    edges = {}
    for relative, path in sources(root, CODE_ROOTS + ("tests", "fuzz", "tools")):
        parts = relative.split(os.sep)
        own_room = "cli" if parts[0] == "cli" else (parts[1] if parts[0] in ("core", "gui") and len(parts) > 2 else None)
        with open(path, encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                match = INCLUDE.match(line)
                if not match:
                    continue
                included = match.group(1)
                if included.endswith(".moc"):
                    continue
                if "/" not in included:
                    # tests include their own support files beside them; code names the room
                    if parts[0] in CODE_ROOTS and not os.path.exists(os.path.join(os.path.dirname(path), included)):
                        problems.append(f"{relative}:{number}: #include \"{included}\" names no room")
                    elif parts[0] in CODE_ROOTS:
                        problems.append(f"{relative}:{number}: #include \"{included}\": name its room "
                                        f"(\"{own_room or '?'}/{included}\")")
                    continue
                room = included.split("/", 1)[0]
                if room not in rooms:
                    if parts[0] in CODE_ROOTS:
                        problems.append(f"{relative}:{number}: #include \"{included}\": no room {room} in core/ or gui/")
                    continue
                if own_room and room != own_room and rooms.get(own_room) == rooms[room]:
                    edges.setdefault(own_room, set()).add(room)
                    if rooms[room] == "gui" and room not in GUI_MAY_INCLUDE.get(own_room, set()):
                        allowed = ", ".join(sorted(GUI_MAY_INCLUDE.get(own_room, ()))) or "no other gui room"
                        problems.append(f"{relative}:{number}: gui/{own_room} includes gui/{room}, above it or beside "
                                        f"it (it may include {allowed}): pass plain values down instead")
    for cycle in cycles(edges):
        problems.append("rooms include one another in a cycle: " + " -> ".join(cycle))


def cycles(edges):
    """One cycle through each room that is on one (depth-first, in name order)."""
    found, reported = [], set()
    state = {}

    def visit(room, path):
        state[room] = "open"
        path.append(room)
        for other in sorted(edges.get(room, ())):
            if state.get(other) == "open":
                cycle = path[path.index(other):] + [other]
                if not set(cycle) <= reported:
                    found.append(cycle)
                    reported.update(cycle)
            elif other not in state:
                visit(other, path)
        path.pop()
        state[room] = "done"

    for room in sorted(edges):
        if room not in state:
            visit(room, [])
    return found


def check_gui_rooms_known(root, problems):
    for name in sorted(os.listdir(os.path.join(root, "gui"))):
        if os.path.isdir(os.path.join(root, "gui", name)) and name not in GUI_MAY_INCLUDE:
            problems.append(f"gui/{name}: a room check_layout.py does not place: add it to GUI_MAY_INCLUDE "
                            f"with the rooms below it")


def check_gui_top(root, problems):
    allowed = {"main.cpp", "CMakeLists.txt"}
    for name in sorted(os.listdir(os.path.join(root, "gui"))):
        if os.path.isfile(os.path.join(root, "gui", name)) and name not in allowed:
            problems.append(f"gui/{name}: a window source goes in its room (window, panels, dialogs, models, "
                            f"widgets, session, plots, report), not at gui/'s top")


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))
    problems = []
    check_sizes(root, problems)
    check_includes(root, problems)
    check_room_sizes(root, problems)
    check_file_circles(root, problems)
    check_gui_top(root, problems)
    check_gui_rooms_known(root, problems)
    for problem in problems:
        print(problem)
    if problems:
        print(f"{len(problems)} layout problems (see CONTRIBUTING.md, 'Where code goes')")
        return 1
    print("layout: files, functions, rooms and includes as CONTRIBUTING.md describes")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""scripts/check_layout.py on small source trees made here: it passes a tree laid out as
CONTRIBUTING.md says, and names each kind of fault issue 48 asked it to catch (a room of more
than 25 files, files that include one another round a circle, a gui room including one above
it). Standard library only."""

import os
import shutil
import subprocess
import sys
import tempfile
import unittest

CHECK = os.path.join(os.path.dirname(__file__), "..", "..", "scripts", "check_layout.py")


def write(root, path, text=""):
    full = os.path.join(root, path)
    os.makedirs(os.path.dirname(full), exist_ok=True)
    with open(full, "w", encoding="utf-8") as f:
        f.write(text)


def includes(*headers):
    return "".join(f'#include "{h}"\n' for h in headers)


class LayoutCheckTest(unittest.TestCase):
    def make_tree(self):
        root = tempfile.mkdtemp(prefix="hs-layout-")
        self.addCleanup(shutil.rmtree, root, True)
        write(root, "cli/main.cpp", includes("store/Store.h"))
        write(root, "core/store/Store.h", "#pragma once\n")
        write(root, "core/store/Store.cpp", includes("store/Store.h"))
        write(root, "core/store/Rows.h", includes("store/Store.h"))
        write(root, "gui/main.cpp", includes("window/Window.h"))
        write(root, "gui/CMakeLists.txt")
        write(root, "gui/window/Window.h", includes("panels/Panel.h", "session/Host.h"))
        write(root, "gui/panels/Panel.h", includes("state/Value.h"))
        write(root, "gui/session/Host.h", includes("state/Value.h"))
        write(root, "gui/state/Value.h", "#pragma once\n")
        return root

    def check(self, root):
        done = subprocess.run([sys.executable, CHECK, root], capture_output=True, text=True)
        return done.returncode, done.stdout

    def test_a_tree_laid_out_as_described_passes(self):
        code, out = self.check(self.make_tree())
        self.assertEqual(code, 0, out)

    def test_a_room_of_more_than_25_files_is_named(self):
        root = self.make_tree()
        for i in range(12):
            write(root, f"core/store/Part{i}.h", "#pragma once\n")
            write(root, f"core/store/Part{i}.cpp", includes(f"store/Part{i}.h"))
        code, out = self.check(root)  # 3 + 24 = 27 files
        self.assertEqual(code, 1, out)
        self.assertIn("core/store: 27 source files, more than 25", out)

    def test_files_that_include_one_another_round_a_circle_are_named(self):
        root = self.make_tree()
        # Store.cpp includes Rows.h, and Rows.h includes Store.h: a circle of two files.
        write(root, "core/store/Store.cpp", includes("store/Store.h", "store/Rows.h"))
        code, out = self.check(root)
        self.assertEqual(code, 1, out)
        self.assertIn("files include one another round a circle: store/Rows -> store/Store -> store/Rows", out)

    def test_a_circle_through_three_gui_files_is_named(self):
        root = self.make_tree()
        write(root, "gui/window/Menus.h", includes("window/Tool.h"))
        write(root, "gui/window/Tool.cpp", includes("window/Window.h"))
        write(root, "gui/window/Window.cpp", includes("window/Window.h", "window/Menus.h"))
        code, out = self.check(root)
        self.assertEqual(code, 1, out)
        self.assertIn("window/Menus -> window/Tool -> window/Window -> window/Menus", out)

    def test_a_panel_including_a_session_is_named(self):
        root = self.make_tree()
        write(root, "gui/panels/Panel.cpp", includes("panels/Panel.h", "session/Host.h"))
        code, out = self.check(root)
        self.assertEqual(code, 1, out)
        self.assertIn("gui/panels includes gui/session, above it or beside it", out)

    def test_a_dialog_including_a_session_is_named(self):
        # A dialog shows what the window hands it; CheckpointCompare ran hookscope-cli itself
        # through session/CliProcess.h, which the check let through.
        root = self.make_tree()
        write(root, "gui/dialogs/Dialog.h", includes("state/Value.h"))
        write(root, "gui/dialogs/Dialog.cpp", includes("dialogs/Dialog.h", "session/Host.h"))
        code, out = self.check(root)
        self.assertEqual(code, 1, out)
        self.assertIn("gui/dialogs includes gui/session, above it or beside it", out)


if __name__ == "__main__":
    unittest.main()

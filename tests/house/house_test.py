"""The house's shape, checked on every build: no production C++ file over 600 lines, nor any
source of the client libraries and the CLI (generated code aside), nor any test, benchmark or
script; every production source under server/ and storage/ has a test of the same stem, or a
line in a CMakeLists.txt under tests/ saying which test covers it; every folder of server/ and
storage/ is one CMake target named after its folder.

Run by CTest (tests/house/CMakeLists.txt): house_test.py <source dir>.
"""
import pathlib
import re
import sys
import unittest

ROOT = pathlib.Path(sys.argv.pop(1) if len(sys.argv) > 1 else ".").resolve()
LAYERS = ("server", "storage")
MAX_LINES = 600
# "# covers: storage/rocksdb/rocksdb_state_store_admin.cc by store_hardening_test"
COVERS = re.compile(r"#\s*covers:\s*(\S+)\s+by\s+(\S+)")


def production_files(suffixes):
    for layer in LAYERS:
        for path in sorted((ROOT / layer).rglob("*")):
            if path.suffix in suffixes and path.is_file():
                yield path


# The client libraries' and the CLI's own sources: what their users read and we maintain. Code
# protoc and its plugins generate (client/go/gen, client/node/src/generated) is not ours to split.
CLIENT_SOURCES = (("client/cpp", ".cc"), ("client/cpp", ".h"), ("cmdline", ".cc"),
                  ("cmdline", ".h"), ("client/go/ratelimit", ".go"), ("client/node/src", ".ts"),
                  ("client/python/src", ".py"))
GENERATED = ("client/go/gen", "client/node/src/generated")


def client_files():
    for folder, suffix in CLIENT_SOURCES:
        for path in sorted((ROOT / folder).rglob("*" + suffix)):
            rel = str(path.relative_to(ROOT))
            if path.is_file() and not rel.startswith(GENERATED) and "_test" not in path.stem:
                yield path


# The tests', benchmarks' and scripts' own sources: read as often as the code they check.
TEST_SOURCES = (("tests", (".cc", ".h", ".py", ".sh")), ("bench", (".cc", ".h")),
                ("scripts", (".sh", ".py")),
                ("client", ("_test.go", ".test.ts", "_test.py", "_test.cc")))


def test_files():
    for folder, suffixes in TEST_SOURCES:
        for path in sorted((ROOT / folder).rglob("*")):
            rel = str(path.relative_to(ROOT))
            if path.is_file() and path.name.endswith(suffixes) and not rel.startswith(GENERATED) \
                    and "node_modules" not in path.parts:
                yield path


def target_name(folder):
    return "ratelimit_" + "_".join(folder.relative_to(ROOT).parts)


class HouseTest(unittest.TestCase):
    def test_no_production_file_is_over_600_lines(self):
        long = []
        for path in production_files({".cc", ".h", ".lua"}):
            lines = len(path.read_text().splitlines())
            if lines > MAX_LINES:
                long.append(f"{path.relative_to(ROOT)}: {lines} lines")
        self.assertEqual(long, [], "split these files by idea")

    def test_no_client_library_file_is_over_600_lines(self):
        files = list(client_files())
        self.assertTrue(any(p.suffix == ".go" for p in files), "no client source found")
        long = [f"{p.relative_to(ROOT)}: {n} lines" for p in files
                if (n := len(p.read_text().splitlines())) > MAX_LINES]
        self.assertEqual(long, [], "split these files by idea")

    def test_no_test_benchmark_or_script_file_is_over_600_lines(self):
        files = list(test_files())
        self.assertTrue(any(p.name.endswith("_test.cc") for p in files), "no test source found")
        long = [f"{p.relative_to(ROOT)}: {n} lines" for p in files
                if (n := len(p.read_text().splitlines())) > MAX_LINES]
        self.assertEqual(long, [], "split these files by idea")

    def test_every_source_has_a_test_of_its_stem_or_a_covers_line(self):
        tests = {p.stem for p in (ROOT / "tests").rglob("*_test.cc")}
        tests |= {p.stem for p in (ROOT / "tests").rglob("*_fuzz.cc")}
        covered = {}
        for cmake in (ROOT / "tests").rglob("CMakeLists.txt"):
            for m in COVERS.finditer(cmake.read_text()):
                covered[m.group(1)] = (m.group(2), cmake)
        missing, stale = [], []
        for path in production_files({".cc"}):
            rel = str(path.relative_to(ROOT))
            if path.name == "main.cc":
                continue  # the binary's entry point, run by the end-to-end tests
            if path.stem + "_test" in tests:
                continue
            if rel in covered:
                test, cmake = covered[rel]
                if test not in tests:
                    stale.append(f"{cmake.relative_to(ROOT)}: {rel} by {test}: no such test")
                continue
            missing.append(rel)
        self.assertEqual(stale, [])
        self.assertEqual(missing, [], "add <stem>_test.cc, or '# covers: <file> by <test>' "
                         "in the CMakeLists.txt of the tests' folder")

    def test_every_folder_is_one_target_named_after_it(self):
        wrong = []
        for layer in LAYERS:
            for cmake in sorted((ROOT / layer).rglob("CMakeLists.txt")):
                folder = cmake.parent
                if not any(folder.glob("*.cc")):
                    continue
                text = cmake.read_text()
                name = target_name(folder)
                if not re.search(r"add_library\(\s*" + re.escape(name) + r"\b", text):
                    wrong.append(f"{cmake.relative_to(ROOT)}: no add_library({name} ...)")
        self.assertEqual(wrong, [])


if __name__ == "__main__":
    unittest.main()

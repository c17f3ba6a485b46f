"""Spec and tests point at each other (convention: spec/README.md "Equations and their tests").

Every tagged equation (`\\tag{n}`) of a spec page is followed by a line
`Tested by: tests/test_x.py::test_a, tests/test_y.py::test_b`, and every test named there cites
the equation back in its docstring as `spec/PAGE.md eq. (n)` (several: `spec/PAGE.md eq. (12),
(13)`). This file reads spec/**/*.md and tests/*.py as text and syntax trees (it imports no
test) and fails, saying what to fix, when
(a) a tagged equation has no `Tested by` line,
(b) a named test does not exist,
(c) a named test's docstring does not cite that equation,
(d) a test docstring cites an equation that does not exist or that does not name the test back,
    or mentions an equation in any other form,
(e) a spec page, or a docstring or comment in tests/, names a repository file that does not
    exist.
A new spec page with tags is covered without editing this file. Parametrised tests are named by
their function name.
"""
import ast
import functools
import re
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SPEC = ROOT / "spec"
TESTS = ROOT / "tests"

TAG = re.compile(r"\\tag\{([^}]*)\}")
TESTED_BY = "Tested by:"
TEST_ID = re.compile(r"^(tests/test_\w+\.py)::(test_\w+)$")
CITATION = re.compile(r"spec/(\w+)\.md eq\. (\(\d+\)(?:, \(\d+\))*)")
# any other way of writing an equation number: "eq. (4)", "eq (4)", "eqs. (4)-(5)", "(4)–(5)"
LOOSE_EQ = re.compile(r"(?<!paper )\beqs?\.? ?\(\d+\)|\(\d+\) ?[–-] ?\(\d+\)")
# repository paths: under a top-level folder of the repository, or a known top-level file
TOP = sorted(p.name for p in ROOT.iterdir() if p.is_dir() and not p.name.startswith("."))
PATH = re.compile(r"(?<![\w./-])((?:" + "|".join(map(re.escape, TOP + ["notes", "docs"]))
                  + r")/[\w.*/-]*[\w*/])(?:::(\w+\*?))?")
TOP_FILE = re.compile(r"(?<![\w./-])([A-Z][A-Z_]*\.md|setup\.py|setup\.cfg|pytest\.ini)\b")
MD_LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def rel(path):
    return path.relative_to(ROOT).as_posix()


# ----------------------------------------------------------------------------------------------
# Reading the spec pages and the tests
# ----------------------------------------------------------------------------------------------

def spec_pages():
    """Every markdown file under spec/, vectors/README.md included."""
    return sorted(SPEC.rglob("*.md"))


def equations():
    """{(page, n): (line number, [test ids] or None)} for every \\tag{n} of spec/*.md but the
    README; page is the stem ("align"). The Tested by line is the next non-blank line after the tag's line.
    Also returns the problems found while reading (bad tags, stray Tested by lines)."""
    found, problems = {}, []
    for path in sorted(SPEC.glob("*.md")):
        if path.name == "README.md":                      # the index: describes the convention
            continue
        lines = path.read_text(encoding="utf-8").splitlines()
        owned = set()                                     # line numbers of Tested by lines used
        for i, line in enumerate(lines):
            for tag in TAG.findall(line):
                where = f"{rel(path)}:{i + 1}"
                if not tag.isdigit():
                    problems.append(f"{where}: \\tag{{{tag}}} is not a number; tag equations 1, 2, 3, ...")
                    continue
                key = (path.stem, int(tag))
                if key in found:
                    problems.append(f"{where}: eq. ({tag}) is tagged twice on {rel(path)} "
                                    f"(also line {found[key][0]}); renumber one of them")
                    continue
                j = i + 1
                while j < len(lines) and not lines[j].strip():
                    j += 1
                tests = None
                if j < len(lines) and lines[j].startswith(TESTED_BY):
                    owned.add(j)
                    tests = [t.strip().strip("`") for t in lines[j][len(TESTED_BY):].split(",")]
                found[key] = (i + 1, tests)
        for j, line in enumerate(lines):
            if TESTED_BY in line and j not in owned:
                problems.append(f"{rel(path)}:{j + 1}: a '{TESTED_BY}' line must start its line and be "
                                f"the first non-blank line after the equation it belongs to")
    return found, problems


def modules():
    """tests/test_*.py except this checker, whose own prose shows the forms it checks."""
    return sorted(p for p in TESTS.glob("test_*.py") if p.name != Path(__file__).name)


@functools.lru_cache(maxsize=None)
def parse(path):
    """path's syntax tree, parsed once for every check (read only)."""
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def named_tests():
    """{"tests/test_x.py::test_name": docstring or ""} for every module-level test function."""
    out = {}
    for path in sorted(TESTS.glob("test_*.py")):
        for node in parse(path).body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test"):
                out[f"{rel(path)}::{node.name}"] = ast.get_docstring(node) or ""
    return out


def docstrings(path):
    """(owner, line, text) for the module's, every class's and every function's docstring;
    owner is the test id for module-level test functions, the name otherwise, None for the
    module."""
    tree = parse(path)
    tests = {node for node in tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
             and node.name.startswith("test")}
    out = [(None, 1, ast.get_docstring(tree) or "")]
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            text = ast.get_docstring(node)
            if text:
                out.append((f"{rel(path)}::{node.name}" if node in tests else node.name, node.lineno, text))
    return out


def citations(text):
    """[(page, n)] cited in text in the fixed form."""
    return [(page, int(n)) for page, numbers in CITATION.findall(text) for n in re.findall(r"\d+", numbers)]


@functools.lru_cache(maxsize=None)
def comments(path):
    """(line, text) of every comment."""
    with open(path, "rb") as f:
        return [(tok.start[0], tok.string) for tok in tokenize.tokenize(f.readline)
                if tok.type == tokenize.COMMENT]


# ----------------------------------------------------------------------------------------------
# The checks
# ----------------------------------------------------------------------------------------------

@pytest.mark.slow
def test_every_equation_names_existing_tests_that_cite_it_back():
    """Checks (a), (b), (c): each tagged equation's Tested by line names tests that exist and
    whose docstrings cite that equation."""
    eqs, problems = equations()
    assert eqs, "no tagged equation found in spec/*.md: is the \\tag{n} convention still in use?"
    tests = named_tests()
    for (page, n), (line, named) in sorted(eqs.items()):
        where, cite = f"spec/{page}.md:{line}", f"spec/{page}.md eq. ({n})"
        if not named or named == [""]:
            problems.append(f"{where}: {cite} has no '{TESTED_BY}' line; add one right below the equation "
                            f"naming the tests that check it (write a test if none does)")
            continue
        for test in named:
            if not TEST_ID.match(test):
                problems.append(f"{where}: '{test}' in the {TESTED_BY} line of {cite} is not of the form "
                                f"tests/test_FILE.py::test_NAME")
            elif test not in tests:
                problems.append(f"{where}: {cite} names {test}, which does not exist; fix the name or "
                                f"write the test")
            elif (page, n) not in citations(tests[test]):
                problems.append(f"{test}: its docstring must cite '{cite}' (it is named by the {TESTED_BY} "
                                f"line at {where})")
        if len(set(named)) != len(named):
            problems.append(f"{where}: the {TESTED_BY} line of {cite} names a test twice")
    assert not problems, "\n".join(problems)


@pytest.mark.slow
def test_every_citation_in_a_test_is_named_back():
    """Check (d): a docstring in tests/ cites only equations that exist and whose Tested by line
    names that test, only from a test's own docstring, and only in the fixed form."""
    eqs, _ = equations()
    problems = []
    for path in modules():
        for owner, line, text in docstrings(path):
            where = f"{rel(path)}:{line}"
            cited = citations(text)
            for page, n in cited:
                cite = f"spec/{page}.md eq. ({n})"
                if (page, n) not in eqs:
                    problems.append(f"{where}: cites {cite}, which does not exist (spec/{page}.md has no "
                                    f"\\tag{{{n}}}); cite the right equation")
                elif owner is None or "::" not in owner:
                    problems.append(f"{where}: the docstring of {owner or 'the module'} cites {cite}; only "
                                    f"a test's docstring cites equations (move it to the test that checks it)")
                elif owner not in (eqs[(page, n)][1] or []):
                    problems.append(f"{where}: {owner} cites {cite}, but the {TESTED_BY} line at "
                                    f"spec/{page}.md:{eqs[(page, n)][0]} does not name it; add it there "
                                    f"or drop the citation")
            for loose in LOOSE_EQ.findall(CITATION.sub("(0)", text)):
                problems.append(f"{where}: '{loose}' in the docstring of {owner or 'the module'}: write "
                                f"every equation as 'spec/PAGE.md eq. (n)' (lists: eq. (1), (2); no ranges), "
                                f"or 'paper eq. (n)' for the paper's numbering")
    assert not problems, "\n".join(problems)


def mentioned_paths(text):
    """(path, test name or None) for every repository path named in text."""
    out = [(m.group(1).rstrip("."), m.group(2)) for m in PATH.finditer(text)]
    return out + [(m.group(1), None) for m in TOP_FILE.finditer(text)]


@functools.lru_cache(maxsize=None)
def exists(path, base):
    """path relative to the repository root or to base; a glob needs one match."""
    for root in (ROOT, base):
        if "*" in path:
            if list(root.glob(path.rstrip("/"))):
                return True
        elif (root / path).exists():
            return True
    return False


def check_path(path, name, where, base, tests, problems):
    if not exists(path, base):
        problems.append(f"{where}: names {path}, which is not in the repository; point at the file "
                        f"that exists or drop the reference")
    elif name is not None:
        if name.endswith("*") or f"{path}::{name}" not in tests:
            problems.append(f"{where}: names {path}::{name}, which is not a test; name an existing "
                            f"test function in full")


@pytest.mark.slow
def test_every_file_a_spec_page_or_test_names_exists():
    """Check (e): repository paths named by spec pages (in text and in links), and by docstrings
    and comments in tests/, exist; `tests/x.py::name` names an existing test."""
    tests = named_tests()
    problems = []
    for page in spec_pages():
        for i, line in enumerate(page.read_text(encoding="utf-8").splitlines()):
            where = f"{rel(page)}:{i + 1}"
            for path, name in mentioned_paths(line):
                check_path(path, name, where, page.parent, tests, problems)
            for target in MD_LINK.findall(line):
                if "://" not in target and not (page.parent / target).exists():
                    problems.append(f"{where}: the link ({target}) points at no file; fix the link")
    for path in modules() + [TESTS / "conftest.py"]:
        prose = [(line, text) for _, line, text in docstrings(path)] + comments(path)
        for line, text in prose:
            for found, name in mentioned_paths(text):
                check_path(found, name, f"{rel(path)}:{line}", ROOT, tests, problems)
    assert not problems, "\n".join(problems)


ROW = re.compile(r"^\| (R\d+|eq\. \(\d+\)(?:, \(\d+\))*) \|[^|]*\|([^|]*)\|$")
TABLE_TEST = re.compile(r"(?:(test_\w+) )?`(test_\w+)(?:\[[^\]]*\])?`")


@pytest.mark.slow
def test_readme_coverage_table_agrees_with_the_tested_by_lines():
    """The coverage table of spec/README.md (rule or equation of align.md -> vectors -> tests)
    names existing tests, and every test it lists for an equation is on that equation's Tested by
    line. Its tests are in tests/test_align.py unless the file is named before them."""
    eqs, _ = equations()
    tests = named_tests()
    problems, rows = [], 0
    for i, line in enumerate((SPEC / "README.md").read_text(encoding="utf-8").splitlines()):
        m = ROW.match(line)
        if not m:
            continue
        rows += 1
        where = f"spec/README.md:{i + 1}"
        numbers = [int(n) for n in re.findall(r"\d+", m.group(1))] if m.group(1).startswith("eq") else []
        for module, name in TABLE_TEST.findall(m.group(2)):
            test = f"tests/{module or 'test_align'}.py::{name}"
            if test not in tests:
                problems.append(f"{where}: the coverage table names {test}, which does not exist")
                continue
            for n in numbers:
                if test not in (eqs.get(("align", n), (0, None))[1] or []):
                    problems.append(f"{where}: the coverage table lists {test} for eq. ({n}); add it to the "
                                    f"{TESTED_BY} line of spec/align.md eq. ({n}) (and cite it in its "
                                    f"docstring) or drop it from the table")
    assert rows >= 25, f"spec/README.md: found only {rows} rows of the coverage table; did its format change?"
    assert not problems, "\n".join(problems)


# ----------------------------------------------------------------------------------------------
# The checker checks
# ----------------------------------------------------------------------------------------------

@pytest.mark.slow
def test_the_checker_reads_the_forms_it_documents():
    """The parsing the checks rely on, on literal examples (the checks above pass vacuously if a
    pattern stops matching)."""
    assert citations("spec/align.md eq. (12), (13), (14) and spec/objectives.md eq. (7).") == [
        ("align", 12), ("align", 13), ("align", 14), ("objectives", 7)]
    assert citations("spec/align.md eq (4); spec/align.md, eq. (4)") == []
    assert LOOSE_EQ.findall("the gradient of eq. (7); eqs. (2) and (3); paper eq. (9)") == ["eq. (7)", "eqs. (2)"]
    assert LOOSE_EQ.findall(CITATION.sub("(0)", "spec/align.md eq. (12)–(14)")) == ["(0)–(14)"]
    assert mentioned_paths("see notes/align_api.md, `spec/vectors/brute_force.py` and README.md.") == [
        ("notes/align_api.md", None), ("spec/vectors/brute_force.py", None), ("README.md", None)]
    assert mentioned_paths("tests/test_train.py::test_restarts_*") == [("tests/test_train.py", "test_restarts_*")]
    assert not exists("notes/align_api.md", SPEC) and exists("vectors/README.md", SPEC)
    eqs, _ = equations()
    assert ("align", 25) in eqs and len([k for k in eqs if k[0] == "align"]) == 25
    assert "tests/test_spec_links.py::test_the_checker_reads_the_forms_it_documents" in named_tests()
    assert "tests/test_align.py::test_taco_matches_brute_force" in named_tests()

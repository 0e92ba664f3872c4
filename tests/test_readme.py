"""README.md and docs/ stay true to the tree: every gin file is in README's configs layout,
every command a shell block names is installed by setup.py, every config path they give
exists, and README keeps to a user's guide (its length, no dates or commit hashes outside the
results table's heading)."""

import pathlib
import re

import pytest

pytestmark = pytest.mark.unit  # the unit tier: make test-unit

REPO = pathlib.Path(__file__).resolve().parents[1]
README = REPO / "README.md"
DOCS = sorted((REPO / "docs").glob("*.md"))
GIN_FILES = sorted((REPO / "configs").rglob("*.gin"))


def read(path: pathlib.Path) -> str:
    return path.read_text(encoding="utf-8")


def shell_blocks(text: str) -> list[str]:
    """The bodies of the ```bash blocks of a markdown text."""
    return re.findall(r"^```bash\n(.*?)^```", text, flags=re.S | re.M)


def console_scripts() -> set[str]:
    return set(re.findall(r'"(bertjax-[\w-]+)=bertjax\.', read(REPO / "setup.py")))


def test_the_pages_exist():
    assert GIN_FILES and DOCS and README.is_file()


def test_readme_lists_every_gin_file():
    readme = read(README)
    missing = [p.relative_to(REPO).as_posix() for p in GIN_FILES
               if not re.search(rf"(?<![\w.]){re.escape(p.name)}(?![\w.])", readme)]
    assert not missing, f"README.md's Configs section does not name {missing}"


def test_readme_names_only_gin_files_that_exist():
    names = {p.name for p in GIN_FILES}
    named = set(re.findall(r"(?<![\w.*<>/-])(\w+\.gin)\b", read(README)))
    assert named - names == set(), "README.md names gin files configs/ does not hold"


@pytest.mark.parametrize("page", [README, *DOCS], ids=lambda p: p.name)
def test_shell_blocks_name_installed_commands(page):
    commands = set(re.findall(r"(?<![\w/.-])(bertjax-[a-z][\w-]*)", "\n".join(
        shell_blocks(read(page)))))
    assert commands - console_scripts() == set(), f"{page.name}: not a console script in setup.py"


def commands(page: pathlib.Path) -> list[list[str]]:
    """The bertjax-* command lines of a page's shell blocks, as words (continuations joined,
    comments dropped)."""
    lines = "\n".join(shell_blocks(read(page))).replace("\\\n", " ").splitlines()
    segments = [part for line in lines for part in re.split(r"[;|]|&&|\$\(", line.split(" # ")[0])]
    return [seg.split() for seg in segments if seg.strip().startswith("bertjax-")]


def tool_sources() -> dict[str, str]:
    """console script -> the text of its module and of the flags every tool shares."""
    shared = read(REPO / "bertjax" / "cli" / "runner.py")
    modules = re.findall(r'"(bertjax-[\w-]+)=bertjax\.cli\.(\w+):', read(REPO / "setup.py"))
    return {name: read(REPO / "bertjax" / "cli" / f"{module}.py") + shared
            for name, module in modules}


@pytest.mark.parametrize("page", [README, *DOCS], ids=lambda p: p.name)
def test_shell_blocks_use_flags_their_tools_define(page):
    sources, unknown = tool_sources(), []
    for words in commands(page):
        source = sources.get(words[0], "")
        own = words[1:words.index("--")] if "--" in words else words[1:]  # after --: passed on
        for flag in re.findall(r"^--(\w+)", "\n".join(own), flags=re.M):
            names = {flag, flag.removeprefix("no")}
            if flag not in ("help", "gin") and not any(f'"{n}"' in source for n in names):
                unknown.append(f"{words[0]} --{flag}")
    assert not unknown, f"{page.name}: flags their tools do not define: {unknown}"


@pytest.mark.parametrize("page", [README, *DOCS], ids=lambda p: p.name)
def test_config_paths_exist(page):
    text = read(page)
    paths = set(re.findall(r"--gin[_-]file=([^\s`'\"]+)", text))
    paths |= set(re.findall(r"(?<![\w/])(configs/[\w/]+\.gin)", text))
    missing = sorted(p for p in paths if not (REPO / p).is_file())
    assert not missing, f"{page.name} gives config paths that do not exist: {missing}"


def anchor(heading: str) -> str:
    """GitHub's anchor of a markdown heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


@pytest.mark.parametrize("page", [README, *DOCS], ids=lambda p: p.name)
def test_links_reach_files_and_headings(page):
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", read(page)):
        if re.match(r"[a-z]+://", target):
            continue
        path, _, fragment = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(target)
        elif fragment and fragment not in {anchor(h) for h in re.findall(
                r"^#+ (.*)$", read(file), flags=re.M)}:
            broken.append(target)
    assert not broken, f"{page.name} links to what is not there: {broken}"


def test_readme_is_a_users_guide():
    lines = read(README).splitlines()
    assert 200 <= len(lines) < 260, f"README.md has {len(lines)} lines: keep it to 200-259"
    dated = [line for line in lines if re.search(r"\b20\d\d-\d\d-\d\d\b", line)]
    assert len(dated) == 1 and dated[0].startswith("## Results (NVIDIA H100"), dated
    hashes = [line for line in lines if re.search(r"\bcommit [0-9a-f]{7,40}\b", line)]
    assert not hashes, hashes

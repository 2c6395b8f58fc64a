"""The wheel is the product: built, checked, installed on its own, and the docs run from it.

``python -m build`` makes the sdist and, from the sdist, the wheel, into a temporary folder;
``twine check --strict`` accepts both. The wheel holds every file of the package tree
(templates, static files, migrations, ``py.typed``) and its version is ``__version__`` of
``django_pydantic_agent/__init__.py``, the one place it is written.

The wheel file is then installed, with uvicorn and ServeStatic, into a fresh virtualenv that
``python -m venv`` makes outside the repository: no editable install and no work tree on
``sys.path`` (checked: the package imports from the virtualenv). From it:

- **Getting started** runs as printed (``docs_project.getting_started``): ``startproject``,
  the settings, URLs and ASGI module, ``migrate``, the user, uvicorn, and every curl call with
  the output the page shows.
- **The chat page** follows ``docs/chat-page.md`` literally on top of Getting started: its
  python blocks go into the files they name. Under uvicorn with ``DEBUG`` on, as
  ``startproject`` leaves it (Getting started's ``asgi.py`` serves ``/static/``), a visit to
  ``/chat/`` without a session goes to the login page the docs mount, a user who is not staff
  logs in there and is sent back, and the page, the admin's login page and every script,
  module and stylesheet they load answer 200. Headless Chromium then does the same through
  the form and gets the agent's answer, which only the page's scripts can draw.
- **Production**, as ``docs/deployment.md#static-files`` says: ``DEBUG`` off, its settings
  block, ``collectstatic``, and the same pages and files, now served from ``STATIC_ROOT`` by
  ServeStatic, with no warning in uvicorn's log.

About two minutes on 2 cores, most of it pip and the build's own isolated environment; it
needs PyPI (or a mirror pip is configured for), Node.js and Chromium like the other e2e tests.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from email.parser import Parser
from pathlib import Path

import httpx
import pytest

from tests.e2e.docs_project import (
    DOCS,
    apply_getting_started,
    apply_python_block,
    assert_all_served,
    free_port,
    getting_started,
    newcomer_env,
    page_assets,
    page_blocks,
    serve,
    start_project,
)
from tests.e2e.nodejs import run_page_script
from tests.e2e.test_browser import artifacts  # noqa: F401  (fixture)

pytestmark = pytest.mark.wheel

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "django_pydantic_agent"
CHAT_PAGE = DOCS / "chat-page.md"
DEPLOYMENT = DOCS / "deployment.md"

#: The command chat-page.md serves the project with ("Serve the project as before").
UVICORN = "uvicorn myproject.asgi:application --lifespan on"
#: Blocks of chat-page.md the fresh project does not run, by their first line, with the reason.
CHAT_PAGE_NOT_RUN = {
    "{% load agent_chat %}": "the tag in a page of your own: tests/contrib/chat renders it",
    ":root {": "a theme: CSS a project adds after chat.css",
}
#: A user who is not staff: the admin's login page would refuse them, the page's must not.
USERNAME, PASSWORD = "bea", "bea-password"

#: Files the package cannot work without, each of which a packaging mistake has dropped
#: somewhere before: a template, the static files, a migration, the typing marker.
REQUIRED = (
    "django_pydantic_agent/py.typed",
    "django_pydantic_agent/contrib/chat/templates/agent_chat/page.html",
    "django_pydantic_agent/contrib/chat/templates/agent_chat/login.html",
    "django_pydantic_agent/contrib/chat/static/agent_chat/chat.js",
    "django_pydantic_agent/contrib/chat/static/agent_chat/chat.css",
    "django_pydantic_agent/contrib/chat/static/agent_chat/modules/transport.js",
    "django_pydantic_agent/contrib/store/migrations/0001_initial.py",
    "django_pydantic_agent/contrib/store/templates/django_pydantic_agent_store/admin/message.html",
    "django_pydantic_agent/contrib/memory_service_emulator/migrations/0001_initial.py",
)


@dataclass(frozen=True)
class Dist:
    sdist: Path
    wheel: Path


def _run(args: list[str | Path], cwd: Path, env: dict[str, str] | None = None) -> str:
    result = subprocess.run(
        [str(arg) for arg in args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, f"{args} failed:\n{result.stdout}\n{result.stderr}"
    return result.stdout


def source_version() -> str:
    """``__version__`` as ``django_pydantic_agent/__init__.py`` writes it (not imported)."""
    found = re.search(
        r'^__version__ = "([^"]+)"$', (PACKAGE / "__init__.py").read_text(), re.MULTILINE
    )
    assert found, "django_pydantic_agent/__init__.py has no __version__ line"
    return found.group(1)


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Dist:
    """The sdist and the wheel ``python -m build`` makes (the wheel from the sdist)."""
    out = tmp_path_factory.mktemp("dist")
    _run([sys.executable, "-m", "build", "--outdir", out, ROOT], cwd=out)
    (sdist,) = out.glob("*.tar.gz")
    (wheel,) = out.glob("*.whl")
    return Dist(sdist, wheel)


@pytest.fixture(scope="module")
def venv_bin(dist: Dist, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The ``bin`` of a fresh virtualenv holding the wheel, uvicorn and ServeStatic."""
    home = tmp_path_factory.mktemp("newcomer")
    bin_dir = home / "venv" / "bin"
    env = newcomer_env(bin_dir)  # nothing of this test's sys.path reaches pip
    _run([sys.executable, "-m", "venv", home / "venv"], cwd=home, env=env)
    install = ["-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    _run([bin_dir / "python", *install, dist.wheel, "uvicorn", "servestatic"], cwd=home, env=env)
    return bin_dir


def test_the_sdist_and_the_wheel_pass_twine_check(dist: Dist) -> None:
    output = _run(
        [sys.executable, "-m", "twine", "check", "--strict", dist.sdist, dist.wheel],
        cwd=dist.wheel.parent,
    )

    assert output.count("PASSED") == 2, output


def test_the_wheel_holds_the_package_tree_and_its_one_version(dist: Dist) -> None:
    tree = {
        path.relative_to(ROOT).as_posix()
        for path in PACKAGE.rglob("*")
        if path.is_file() and "__pycache__" not in path.parts
    }
    with zipfile.ZipFile(dist.wheel) as wheel:
        names = set(wheel.namelist())
        (metadata,) = [name for name in names if name.endswith(".dist-info/METADATA")]
        fields = Parser().parsestr(wheel.read(metadata).decode())
    packaged = {name for name in names if name.startswith("django_pydantic_agent/")}

    assert sorted(tree - packaged) == [], "files of the package the wheel leaves out"
    assert sorted(packaged - tree) == [], "files in the wheel that are not the package's"
    assert set(REQUIRED) <= packaged
    assert fields["Version"] == source_version()
    assert dist.wheel.name == f"django_pydantic_agent-{source_version()}-py3-none-any.whl"
    assert dist.sdist.name == f"django_pydantic_agent-{source_version()}.tar.gz"
    project = (ROOT / "pyproject.toml").read_text().split("[project.optional-dependencies]")[0]
    assert 'dynamic = ["version"]' in project
    assert not re.search(r"^version\s*=", project, re.MULTILINE), "a second copy of the version"


def test_the_installed_wheel_is_what_runs(venv_bin: Path, tmp_path: Path) -> None:
    probe = (
        "import importlib.metadata, django_pydantic_agent as p; "
        "print(p.__file__); print(p.__version__); "
        "print(importlib.metadata.version('django-pydantic-agent'))"
    )
    where, version, installed = _run(
        [venv_bin / "python", "-c", probe], cwd=tmp_path, env=newcomer_env(venv_bin)
    ).split()

    assert Path(where).is_relative_to(venv_bin.parent), where
    assert not Path(where).is_relative_to(ROOT)
    assert version == installed == source_version()


def test_getting_started_runs_from_the_wheel(venv_bin: Path, tmp_path: Path) -> None:
    getting_started(tmp_path, venv_bin)


@pytest.fixture(scope="module")
def chat_project(venv_bin: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Getting started's project with the python blocks of chat-page.md, migrated, and a
    user who is not staff."""
    project = start_project(tmp_path_factory.mktemp("chat-page"), venv_bin)
    apply_getting_started(project)
    blocks = page_blocks(CHAT_PAGE)
    python = [block for block in blocks if block.lang == "python"]
    assert {block.section for block in python} == {"Mount it"}
    assert len(python) == 2, "chat-page.md's settings line and its urls.py"
    for block in python:
        apply_python_block(block, project)
    others = {block.text.split("\n")[0] for block in blocks if block.lang != "python"}
    assert others == set(CHAT_PAGE_NOT_RUN), "a block of chat-page.md neither run nor explained"
    env = newcomer_env(venv_bin)
    _run([venv_bin / "python", "manage.py", "migrate", "--noinput"], cwd=project, env=env)
    create = (
        "from django.contrib.auth.models import User; "
        f"User.objects.create_user({USERNAME!r}, password={PASSWORD!r})"
    )
    shell = [venv_bin / "python", "manage.py", "shell", "-c", create]
    _run(shell, cwd=project, env=env)
    return project


@pytest.fixture
def served(chat_project: Path, venv_bin: Path, tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """The chat project under uvicorn, as chat-page.md serves it: its URL and uvicorn's log."""
    port = free_port()
    log = tmp_path / "uvicorn.log"
    with serve(UVICORN, chat_project, port, log, venv_bin):
        yield f"http://127.0.0.1:{port}", log


def check_the_pages(url: str) -> dict[str, httpx.Response]:
    """Log in through the page's redirect; the page, the admin's login page and every file
    they load answer 200. Returns the chat page's assets."""
    with httpx.Client(base_url=url, timeout=30) as client:
        anonymous = client.get("/chat/")
        assert anonymous.status_code == 302
        login_url = anonymous.headers["location"]
        assert login_url == "/accounts/login/?next=/chat/"
        login = page_assets(client, login_url)
        assert login[login_url].status_code == 200
        assert_all_served(login, ["/agent_chat/chat.css"])

        answer = client.post(
            login_url,
            data={
                "csrfmiddlewaretoken": client.cookies["csrftoken"],
                "username": USERNAME,
                "password": PASSWORD,
                "next": "/chat/",
            },
        )
        assert answer.status_code == 302, answer.text
        assert answer.headers["location"] == "/chat/"

        chat = page_assets(client, "/chat/")
        assert 'data-agent-url="/agent/"' in chat["/chat/"].text
        assert_all_served(
            chat,
            ["/agent_chat/chat.css", "/agent_chat/chat.js", "/agent_chat/modules/markdown.js"],
        )
        modules = [path for path in chat if "/agent_chat/modules/" in path]
        shipped = list((PACKAGE / "contrib/chat/static/agent_chat/modules").glob("*.js"))
        assert len(modules) == len(shipped), "the page loads every module the app ships"

        admin = page_assets(client, "/admin/login/")
        assert_all_served(admin, ["/admin/css/base.css", "/admin/css/login.css"])
        return chat


def test_the_chat_page_and_the_admin_load_in_development(served: tuple[str, Path]) -> None:
    url, log = served

    chat = check_the_pages(url)

    assert all(r.headers["content-type"].startswith("text/") for r in chat.values())
    assert "Warning" not in log.read_text()


def test_the_chat_page_runs_in_chromium(
    served: tuple[str, Path],
    node_scripts: Path,
    chromium: str,
    artifacts: Path,  # noqa: F811
) -> None:
    url, log = served

    report, steps = run_page_script(
        node_scripts,
        "newcomer_chat.mjs",
        url,
        USERNAME,
        PASSWORD,
        str(artifacts),
        artifacts=artifacts,
        name="newcomer-chat",
        chromium=chromium,
    )

    assert steps["login page"] == {
        "step": "login page",
        "path": "/accounts/login/?next=/chat/",
        "styled": True,
    }
    assert steps["answer"]["path"] == "/chat/"
    assert steps["answer"]["answer"] == ["success (no tool calls)"]
    assert steps["answer"]["styled"] is True
    assert report["failed"] == []
    # The browser asks for /favicon.ico by itself (the page links no icon): a 404 in any
    # project without one, and the only request that may fail.
    not_found = re.findall(r'"GET (\S+) HTTP/1\.1" 404', log.read_text())
    assert set(not_found) <= {"/favicon.ico"}, not_found
    assert len(report["consoleErrors"]) == len(not_found), report["consoleErrors"]


def test_the_chat_page_and_the_admin_load_in_production(
    chat_project: Path, venv_bin: Path, tmp_path: Path
) -> None:
    project = tmp_path / "myproject"
    shutil.copytree(chat_project, project)
    (static,) = [
        block
        for block in page_blocks(DEPLOYMENT)
        if block.section == "Static files" and block.lang == "python"
    ]
    apply_python_block(static, project)
    with (project / "myproject" / "settings.py").open("a", encoding="utf-8") as settings:
        settings.write('\nDEBUG = False\nALLOWED_HOSTS = ["127.0.0.1"]\n')
    (collect,) = [
        block.text
        for block in page_blocks(DEPLOYMENT)
        if block.section == "Static files" and block.lang == "console"
    ]
    assert collect == "$ python manage.py collectstatic --noinput"
    env = newcomer_env(venv_bin)
    _run([venv_bin / "python", "manage.py", "collectstatic", "--noinput"], cwd=project, env=env)
    assert (project / "staticfiles" / "agent_chat" / "chat.js").is_file()
    port = free_port()
    log = tmp_path / "uvicorn.log"

    with serve(UVICORN, project, port, log, venv_bin):
        chat = check_the_pages(f"http://127.0.0.1:{port}")

    script = chat["/static/agent_chat/chat.js"]
    assert "max-age" in script.headers["cache-control"], "served by ServeStatic"
    assert "Warning" not in log.read_text(), log.read_text()

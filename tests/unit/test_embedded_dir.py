"""The embedded database's folder is per project: two projects never share one."""

from __future__ import annotations

from pathlib import Path

import pytest

from cronbase.db import embedded


@pytest.fixture(autouse=True)
def _no_override(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("CRONBASE_DATA_DIR", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data-home"))


def project(tmp_path: Path, name: str) -> Path:
    root = tmp_path / name
    (root / "src" / "pkg").mkdir(parents=True)
    (root / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    return root


def test_two_projects_get_two_folders_and_a_subfolder_its_projects(tmp_path: Path) -> None:
    shop, blog = project(tmp_path, "shop"), project(tmp_path, "blog")
    assert embedded.data_dir(shop) != embedded.data_dir(blog)
    # Anywhere inside the project is the same project.
    assert embedded.data_dir(shop / "src" / "pkg") == embedded.data_dir(shop)
    folder = embedded.data_dir(shop)
    assert folder.name == "pgdata"
    assert folder.parent.name.startswith("shop-")
    assert str(tmp_path / "data-home") in str(folder)


def test_two_projects_of_one_name_in_two_places_do_not_share(tmp_path: Path) -> None:
    a = project(tmp_path / "a", "app")
    b = project(tmp_path / "b", "app")
    assert embedded.data_dir(a) != embedded.data_dir(b)


def test_cronbase_data_dir_overrides(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CRONBASE_DATA_DIR", str(tmp_path / "mine"))
    assert embedded.data_dir(project(tmp_path, "shop")) == (tmp_path / "mine").resolve()

"""The lab's stylesheet in JupyterLab: a server extension that serves `static/custom.css` as
JupyterLab's custom stylesheet (`make lab` passes `--LabApp.custom_css=True` and enables this
module with `--ServerApp.jpserver_extensions`).

JupyterLab 4 links `custom/custom.css` when `LabApp.custom_css` is on, and looks for it in the
server's `static_custom_path` (by default the `custom/` folder of the learner's Jupyter config
folder). That path is not a configurable setting, so this extension puts the lab's folder first
in it when the server starts: the learner's own config folder and settings stay as they are.
"""

from __future__ import annotations

from pathlib import Path

#: The lab's stylesheet (listings that keep their lines, tables that scroll inside their box).
STYLESHEET = Path(__file__).with_name("static") / "custom.css"


def css() -> str:
    """The stylesheet's text (the app puts it in its page)."""
    return STYLESHEET.read_text(encoding="utf-8")


def _jupyter_server_extension_points():
    return [{"module": __name__}]


def _load_jupyter_server_extension(serverapp) -> None:
    paths = serverapp.web_app.settings["static_custom_path"]
    folder = str(STYLESHEET.parent)
    if folder not in paths:
        paths.insert(0, folder)        # the same list JupyterLab's custom/ handler searches

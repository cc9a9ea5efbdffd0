"""Write this folder's stylesheets from the JupyterLab and nbconvert wheels (run by hand, once per
version: `python tests/jupyter_css/vendor.py [WHEEL_DIR]`; without WHEEL_DIR it runs `pip download`).

JupyterLab ships its own CSS inside its JavaScript bundles (webpack's css-loader): the CSS
modules of jlab_core, JupyterLab's own (each begins with the Jupyter Development Team's
copyright), are written in bundle order, with `url(${...})` (fonts and icons) replaced by an
empty URL. The themes and nbconvert's templates ship as plain CSS files and are copied as they are.
"""

import re
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

JUPYTERLAB = "4.6.6"
NBCONVERT = "7.17.2"
HERE = Path(__file__).resolve().parent


def _wheel(folder: Path, name: str, version: str) -> zipfile.ZipFile:
    path = folder / f"{name}-{version}-py3-none-any.whl"
    if not path.exists():
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-d", str(folder),
                        f"{name}=={version}"], check=True)
    return zipfile.ZipFile(path)


def _jupyterlab_css(wheel: zipfile.ZipFile) -> str:
    core = next(n for n in wheel.namelist() if re.search(r"/static/jlab_core\.[0-9a-f]+\.js$", n))
    source = wheel.read(core).decode()
    blocks = []
    for found in re.finditer(r'\.push\(\[\w+\.id,`(.*?)`,""\]\)', source, re.S):
        css = re.sub(r"url\(\$\{[^}]*\}\)", "url()", found.group(1))
        css = re.sub(r"\\(.)", r"\1", css, flags=re.S)  # the template literal's escapes
        if "Copyright (c) Jupyter Development Team" in css[:300]:
            blocks.append(css)
    header = (f"/* JupyterLab {JUPYTERLAB}: the CSS modules of {Path(core).name} (jupyterlab wheel),\n"
              f"   in bundle order; written by tests/jupyter_css/vendor.py. */\n")
    return header + "\n".join(blocks)


def main(folder: Path) -> None:
    lab = _wheel(folder, "jupyterlab", JUPYTERLAB)
    nb = _wheel(folder, "nbconvert", NBCONVERT)
    (HERE / f"jupyterlab-{JUPYTERLAB}.css").write_text(_jupyterlab_css(lab))
    for theme in ("light", "dark"):
        (HERE / f"jupyterlab-{JUPYTERLAB}-theme-{theme}.css").write_bytes(
            lab.read(f"jupyterlab/themes/@jupyterlab/theme-{theme}-extension/index.css"))
    templates = f"nbconvert-{NBCONVERT}.data/data/share/jupyter/nbconvert/templates"
    for source, target in (("lab/static/index.css", "lab-index.css"),
                           ("lab/static/theme-light.css", "lab-theme-light.css"),
                           ("lab/static/theme-dark.css", "lab-theme-dark.css"),
                           ("classic/static/style.css", "classic-style.css")):
        (HERE / f"nbconvert-{NBCONVERT}-{target}").write_bytes(nb.read(f"{templates}/{source}"))
    # The rules each template's index.html.j2 adds in a <style> of its own (its Jinja conditionals left out).
    for template in ("lab", "classic"):
        page = nb.read(f"{templates}/{template}/index.html.j2").decode()
        block = page[page.index("{% block notebook_css %}"):]
        css = block[block.index('<style type="text/css">') + len('<style type="text/css">'):block.index("</style>")]
        css = re.sub(r"\{%-?\s*if.*?endif\s*-?%\}", "", css, flags=re.S)
        (HERE / f"nbconvert-{NBCONVERT}-{template}-inline.css").write_text(css.strip() + "\n")
    for wheel, name in ((lab, "jupyterlab"), (nb, "nbconvert")):
        license_file = next(n for n in wheel.namelist() if re.search(r"\.dist-info/licenses/LICENSE", n))
        (HERE / f"LICENSE-{name}.txt").write_bytes(wheel.read(license_file))


if __name__ == "__main__":
    if len(sys.argv) > 1:
        main(Path(sys.argv[1]))
    else:
        with tempfile.TemporaryDirectory() as tmp:
            main(Path(tmp))

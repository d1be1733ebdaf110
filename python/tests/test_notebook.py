"""examples/quickstart.ipynb runs from top to bottom, so it cannot rot: each code cell is
executed in order in one namespace, from the notebook's folder, as a kernel would run it."""

import ast
import json
import os

from conftest import ROOT


def test_the_quickstart_notebook_runs():
    notebook = json.loads((ROOT / "examples" / "quickstart.ipynb").read_text())
    namespace: dict = {}
    shown = []
    before = os.getcwd()
    os.chdir(ROOT / "examples")
    try:
        for cell in notebook["cells"]:
            if cell["cell_type"] != "code":
                continue
            tree = ast.parse("".join(cell["source"]))
            # The last expression is what the notebook shows.
            last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
            exec(compile(tree, "quickstart.ipynb", "exec"), namespace)
            if last is not None:
                shown.append(eval(compile(ast.Expression(last.value), "quickstart.ipynb", "eval"), namespace))
    finally:
        os.chdir(before)
    fingerprint = namespace["fingerprint"]
    assert len(fingerprint) == 24  # 6 blocks x 4 heads
    assert fingerprint._repr_html_().startswith("<div><svg")
    assert len(shown[-2]) == 10  # the OV logits' top ten
    assert "induction_score" in shown[-1].columns

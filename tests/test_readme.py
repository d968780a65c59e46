"""The README's Python example runs as written (minus the line that downloads BioLORD)."""

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_example_runs(tmp_path, monkeypatch):
    example = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)[0]
    offline = "\n".join(line for line in example.splitlines() if "from the Hub" not in line)
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    exec(compile(offline, "README.md", "exec"), namespace)
    assert -1.0 <= namespace["score"].item() <= 1.0
    assert namespace["same"].dtype.is_floating_point and (tmp_path / "my-vlm" / "model.safetensors").exists()

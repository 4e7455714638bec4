"""The glossary: every term in English and Chinese, defined, linked to the lesson that teaches it."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


GLOSSARY = ROOT / "notebooks" / "glossary.md"


def glossary_rows():
    rows = [line for line in GLOSSARY.read_text(encoding="utf-8").splitlines()
            if line.startswith("| ") and not line.startswith("| English") and "---" not in line]
    return [[c.strip() for c in r.strip("|").split("|")] for r in rows]


def test_glossary_rows_give_term_chinese_definition_and_lesson():
    terms = [r for r in glossary_rows() if len(r) == 4]
    assert len(terms) >= 40
    for english, chinese, definition, lesson in terms:
        assert english and chinese and len(definition.split()) >= 5, english
        assert re.search(r"\]\(\d\d_\w+\.ipynb\)", lesson), english


def test_glossary_links_point_to_notebooks_that_exist():
    for link in re.findall(r"\]\(([^)#]+\.ipynb)\)", GLOSSARY.read_text(encoding="utf-8")):
        assert (ROOT / "notebooks" / link).exists(), link


def glossary_chinese() -> str:
    """The Chinese column of the definition rows (not the index at the end)."""
    return "\n".join(r[1] for r in glossary_rows() if len(r) == 4)


def test_glossary_defines_the_source_texts_core_terms():
    text = glossary_chinese()
    for term in ("危险窗口", "幂等键", "崩溃点", "快照", "事件日志", "撕裂写", "补换行", "三方一致",
                 "至少一次", "至多一次", "效果上恰好一次", "检查点", "续跑", "原子", "压缩",
                 "页缓存", "用户态缓冲区", "三的法则", "意图", "只认第一次写入"):
        assert term in text, term

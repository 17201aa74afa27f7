import pyarrow as pa

from pipeline.stages.normalize import Normalize, NormalizeConfig


def _norm(texts):
    out = Normalize(NormalizeConfig(), None).process(
        pa.table({"id": [str(i) for i in range(len(texts))], "text": texts})
    )
    return out["text"].to_pylist(), out["_reason"].to_pylist()


def test_normalize_rules():
    texts, reasons = _norm(
        [
            "Cafe\u0301 <b>bold</b> &amp; <i>IL-6</i>&nbsp;levels\r\nnext\u0007 line",
            "p < 0.05 and n > 3; a<b and c>d",
            "<script>var x = 1;</script>Text   with \t tabs\n\n\n\nand paragraphs  ",
            "   \u200b  ",
        ]
    )
    assert texts[0] == "Café bold & IL-6 levels\nnext line"
    assert texts[1] == "p < 0.05 and n > 3; a<b and c>d"  # science is not HTML
    assert texts[2] == "Text with tabs\n\nand paragraphs"
    assert reasons == [None, None, None, "empty_text"]

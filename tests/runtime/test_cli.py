import json

import pytest
from conftest import DEMO_PATTERNS, ruler_nlp
from typer.testing import CliRunner

from spacy_sapbert.cli import app

runner = CliRunner()


def said(result) -> str:
    """The command's output with wasabi's line wrapping undone."""
    return " ".join(result.output.split())


@pytest.fixture(scope="module")
def cli_index(tiny_model, tiny_kb_file, tmp_path_factory):
    out = tmp_path_factory.mktemp("cli") / "index"
    result = runner.invoke(app, [
        "build-index", "--kb", str(tiny_kb_file), "--format", "jsonl", "--model", str(tiny_model),
        "--output", str(out), "--device", "cpu", "--label-types", '{"Disease": ["C"], "Chemical": ["D"]}',
    ])
    assert result.exit_code == 0, result.output
    return out


@pytest.fixture(scope="module")
def ner_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("ner") / "ruler"
    ruler_nlp(DEMO_PATTERNS).to_disk(path)
    return path


def test_build_index_and_info(cli_index):
    meta = json.loads((cli_index / "meta.json").read_text())
    assert (meta["n_concepts"], meta["label_types"]["Chemical"]) == (10, ["D"])
    result = runner.invoke(app, ["info", str(cli_index)])
    assert result.exit_code == 0 and "model_fingerprint" in said(result) and meta["model_fingerprint"] in said(result)


def test_link_text_prints_a_table(cli_index, ner_dir, tiny_model):
    result = runner.invoke(app, [
        "link", "Lactic acidosis after metformin.", "--ner", str(ner_dir), "--model", str(tiny_model),
        "--index", str(cli_index), "--threshold", "0",
    ])
    assert result.exit_code == 0, result.output
    assert "D008687" in result.output and "Metformin" in result.output and "canonical name" in said(result)


def test_link_reads_a_names_table(cli_index, ner_dir, tiny_model, tmp_path):
    names = tmp_path / "names.tsv"
    names.write_text("metformin\tD002945\n", encoding="utf-8")  # the table's concept comes first
    target = tmp_path / "out.jsonl"
    common = ["link", "--input", "-", "--output", str(target), "--ner", str(ner_dir), "--model", str(tiny_model),
              "--index", str(cli_index), "--threshold", "0"]
    result = runner.invoke(app, [*common, "--names", str(names)], input="metformin\n")
    assert result.exit_code == 0, result.output
    assert json.loads(target.read_text().splitlines()[0])["entities"][0]["cui"] == "D002945"
    result = runner.invoke(app, [*common, "--names", str(tmp_path / "nowhere.tsv")], input="metformin\n")
    assert result.exit_code == 1 and "--names '" in said(result) and "Traceback" not in said(result)


def test_link_jsonl_in_and_out(cli_index, ner_dir, tiny_model, tmp_path):
    source = tmp_path / "docs.jsonl"
    source.write_text(json.dumps({"id": 1, "text": "metformin"}) + "\n\n" + json.dumps({"id": 2, "text": ""}) + "\n")
    target = tmp_path / "linked.jsonl"
    result = runner.invoke(app, [
        "link", "--input", str(source), "--output", str(target), "--ner", str(ner_dir),
        "--model", str(tiny_model), "--index", str(cli_index), "--threshold", "0",
    ])
    assert result.exit_code == 0, result.output
    records = [json.loads(line) for line in target.read_text().splitlines()]
    assert [r.get("id") for r in records] == [1, None, 2]  # a blank line stays an (empty) record
    assert records[0]["entities"][0]["cui"] == "D008687" and records[1]["entities"] == records[2]["entities"] == []


def test_link_errors(cli_index, ner_dir, tiny_model, tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "ok"}\n{"txt": "no"}\n')
    result = runner.invoke(app, ["link", "--input", str(bad), "--ner", str(ner_dir), "--model", str(tiny_model), "--index", str(cli_index)])
    assert result.exit_code == 1 and 'bad.jsonl:2: expected a JSON object with a string "text"' in said(result)
    result = runner.invoke(app, ["link"])
    assert result.exit_code == 1 and "Give either a TEXT argument or --input FILE" in said(result)


def test_build_index_reports_malformed_kb(tiny_model, tmp_path):
    kb = tmp_path / "dict.txt"
    kb.write_text("D1||fever\nD2 fever\n")
    result = runner.invoke(app, ["build-index", "--kb", str(kb), "--format", "biosyn", "--model", str(tiny_model), "--output", str(tmp_path / "o")])
    assert result.exit_code == 1 and "dict.txt:2: expected 'id||name'" in said(result)
    result = runner.invoke(app, ["info", str(tmp_path)])
    assert result.exit_code == 1 and "holds no concept index" in said(result)


def test_export_onnx_and_convert_index(cli_index, tiny_model, tmp_path):
    result = runner.invoke(app, ["export-onnx", str(tmp_path / "int8"), "--model", str(tiny_model)])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "int8" / "model.onnx").exists() and "int8 ONNX encoder" in said(result)
    result = runner.invoke(app, ["convert-index", str(cli_index), str(tmp_path / "compact")])
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "compact" / "meta.json").read_text())["index_type"] == "hnsw-sq8"
    result = runner.invoke(app, ["convert-index", str(tmp_path / "compact"), str(tmp_path / "again")])
    assert result.exit_code == 1 and "approximate vectors" in said(result)


def test_label_types_of_the_wrong_shape_are_refused_where_given(tiny_kb_file, tiny_model, cli_index, tmp_path):
    import shutil


    from spacy_sapbert.search.index import ConceptIndex, ConceptIndexError

    result = runner.invoke(app, ["build-index", "--kb", str(tiny_kb_file), "--format", "jsonl", "--model", str(tiny_model),
                                 "--output", str(tmp_path / "o"), "--label-types", '["Disease"]'])
    assert result.exit_code == 1 and "--label-types must map entity labels" in " ".join(result.output.split())
    assert result.exception is None or isinstance(result.exception, SystemExit)
    bad = shutil.copytree(cli_index, tmp_path / "bad-types")
    meta = json.loads((bad / "meta.json").read_text())
    meta["label_types"] = ["Disease"]
    (bad / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(ConceptIndexError, match="label_types must map entity labels"):
        ConceptIndex.load(bad)


def test_rows_outside_the_kb_are_refused_at_load_even_with_fresh_checksums(cli_index, tmp_path):
    import shutil

    import numpy as np

    from spacy_sapbert.cache import file_sha256
    from spacy_sapbert.search.index import ConceptIndex, ConceptIndexError

    bad = shutil.copytree(cli_index, tmp_path / "bad-rows")
    rows = np.load(bad / "rows.npy")
    rows[-1] = 10_000
    np.save(bad / "rows.npy", rows)
    meta = json.loads((bad / "meta.json").read_text())
    meta["files"]["rows.npy"] = {"bytes": (bad / "rows.npy").stat().st_size, "sha256": file_sha256(bad / "rows.npy")}
    (bad / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(ConceptIndexError, match="maps rows to concepts outside the KB"):
        ConceptIndex.load(bad)


def test_info_on_a_broken_meta_json_is_one_sentence(tmp_path):
    (tmp_path / "meta.json").write_text("{not json")
    result = runner.invoke(app, ["info", str(tmp_path)])
    assert result.exit_code == 1 and "is not a valid index meta.json" in " ".join(result.output.split())
    assert result.exception is None or isinstance(result.exception, SystemExit)


def test_info_on_a_saved_pipeline_shows_its_linker_index(cli_index, tiny_model, tmp_path):
    import spacy

    nlp = spacy.blank("en")
    nlp.add_pipe("sapbert_linker", config={"encoder": {"model": str(tiny_model)}, "index": {"index": str(cli_index)}})
    nlp.to_disk(tmp_path / "pipeline")
    result = runner.invoke(app, ["info", str(tmp_path / "pipeline")])
    assert result.exit_code == 0 and "model_fingerprint" in said(result) and "lang" not in said(result).split()
    # and the linker's own settings, as the pipeline's config records them
    assert "threshold" in said(result) and "0.7" in said(result) and "encoder.model" in said(result)


def test_link_reads_stdin_keeps_blank_lines_and_tells_jsonl_by_content(cli_index, ner_dir, tiny_model, tmp_path):
    common = ["--ner", str(ner_dir), "--model", str(tiny_model), "--index", str(cli_index), "--threshold", "0"]
    target = tmp_path / "out.jsonl"
    result = runner.invoke(app, ["link", "--input", "-", "--output", str(target), "--k", "3", *common],
                           input="Metformin was given.\n\nNothing here.\n")
    assert result.exit_code == 0, result.output
    records = [json.loads(line) for line in target.read_text().splitlines()]
    assert [r["text"] for r in records] == ["Metformin was given.", "", "Nothing here."]
    assert len(records[0]["entities"][0]["candidates"]) == 3
    ndjson = tmp_path / "docs.ndjson"  # JSONL by content, whatever the suffix
    ndjson.write_text('{"text": "Metformin was given.", "id": 7}\n')
    result = runner.invoke(app, ["link", "--input", str(ndjson), "--output", str(target), "--labels", "Disease", *common])
    assert result.exit_code == 0, result.output
    (record,) = [json.loads(line) for line in target.read_text().splitlines()]
    assert record["id"] == 7 and all(e["cui"] is None for e in record["entities"] if e["label"] != "Disease")


def test_link_takes_a_saved_pipeline_that_already_links(cli_index, ner_dir, tiny_model, tmp_path):
    import spacy

    nlp = spacy.load(ner_dir)
    nlp.add_pipe("abbreviation_detector")
    nlp.add_pipe("sapbert_linker", config={"encoder": {"model": str(tiny_model)}, "index": {"index": str(cli_index)}})
    nlp.to_disk(tmp_path / "full")
    result = runner.invoke(app, ["link", "Metformin was given.", "--ner", str(tmp_path / "full"), "--model", str(tiny_model),
                                 "--index", str(cli_index), "--threshold", "0"])
    assert result.exit_code == 0, result.output
    assert "D008687" in result.output


def test_build_index_refuses_a_non_empty_output_without_overwrite(tmp_path):
    output = tmp_path / "index"
    output.mkdir()
    (output / "something").write_text("kept")
    kb = tmp_path / "kb.jsonl"
    kb.write_text('{"concept_id": "X:1", "canonical_name": "thing"}\n')
    result = runner.invoke(app, ["build-index", "--kb", str(kb), "--output", str(output)])
    assert result.exit_code != 0 and "already exists and is not empty" in result.output
    assert (output / "something").read_text() == "kept"


def test_link_labels_writes_only_those_entities(cli_index, ner_dir, tiny_model, tmp_path):
    source = tmp_path / "docs.jsonl"
    source.write_text(json.dumps({"text": "lactic acidosis after metformin"}) + "\n")
    target = tmp_path / "linked.jsonl"
    result = runner.invoke(app, [
        "link", "--input", str(source), "--output", str(target), "--ner", str(ner_dir), "--labels", "disease",
        "--model", str(tiny_model), "--index", str(cli_index), "--threshold", "0",
    ])
    assert result.exit_code == 0, result.output
    entities = json.loads(target.read_text())["entities"]
    assert [e["label"] for e in entities] == ["Disease"] and entities[0]["cui"] == "D000140"


def test_redirected_output_has_no_colour_codes():
    result = runner.invoke(app, ["link"])  # a mistake, said with wasabi's msg.fail
    assert result.exit_code != 0 and "Give either a TEXT" in result.output and "\x1b[" not in result.output


def test_an_unusable_cache_folder_is_one_sentence_not_a_traceback(tmp_path, monkeypatch):
    taken = tmp_path / "a-file"
    taken.write_text("not a folder")
    monkeypatch.setenv("SPACY_SAPBERT_CACHE", str(taken))
    result = runner.invoke(app, ["link", "lactic acidosis"])
    assert result.exit_code == 1 and "cannot be used as a cache folder" in said(result)
    assert isinstance(result.exception, SystemExit)  # said and exited, no traceback


def test_build_index_embeds_a_student_s_names_with_its_teacher(tiny_model, tiny_kb_file, tmp_path):
    """A query encoder trained against frozen keys (the default model) searches its teacher's
    vectors, so build-index embeds the names with the teacher, as the bundled index's are."""
    import shutil

    import numpy as np
    import torch

    from spacy_sapbert.encoders.settings import write_settings
    from spacy_sapbert.encoders.transformer import TorchEncoder
    from spacy_sapbert.search.index import ConceptIndex

    teacher = TorchEncoder(tiny_model)
    student = tmp_path / "student"
    shutil.copytree(tiny_model, student)
    from transformers import BertModel

    model = BertModel.from_pretrained(student)
    with torch.no_grad():
        for parameter in model.encoder.parameters():
            parameter.add_(0.05)
    model.save_pretrained(student)
    write_settings(student, teacher={"teacher": str(tiny_model), "fingerprint": teacher.fingerprint})
    result = runner.invoke(app, ["build-index", "--kb", str(tiny_kb_file), "--model", str(student),
                                 "--output", str(tmp_path / "index")])
    assert result.exit_code == 0, result.output
    index = ConceptIndex.load(tmp_path / "index")
    names = index.row_names()
    stored = index.index.reconstruct_n(0, len(names))
    assert np.allclose(stored, teacher.encode(names), atol=1e-5)
    assert not np.allclose(stored, TorchEncoder(student).encode(names), atol=1e-3)


def test_build_index_on_the_runtime_install_encodes_with_the_bundled_int8_export(tiny_kb_file, tmp_path,
                                                                                 monkeypatch):
    """The README's bring-your-own-KB command, where torch is not installed: the file KB is
    encoded by the default model's bundled int8 export (no export, no torch), and the linker
    searches the index it wrote."""
    import importlib.util

    from spacy_sapbert.encoders.models import default_int8_path
    from spacy_sapbert.search.index import ConceptIndex

    if default_int8_path() is None:
        pytest.skip("no bundled int8 export")
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *args: None if name == "torch" else find_spec(name, *args))
    result = runner.invoke(app, ["build-index", "--kb", str(tiny_kb_file), "--format", "jsonl",
                                 "--output", str(tmp_path / "index"), "--index-type", "hnsw-sq8"])
    assert result.exit_code == 0, result.output
    meta = ConceptIndex.load(tmp_path / "index").meta
    assert meta["name_precision"] == "int8"
    assert meta["model"] == "default"  # as named, not this machine's path to it
    nlp = ruler_nlp(DEMO_PATTERNS)
    nlp.add_pipe("sapbert_linker", config={"index": {"index": str(tmp_path / "index")}, "resolve_abbreviations": False})
    assert nlp("metformin").ents[0]._.cui == "D008687"


def test_errors_name_the_flags_typed_not_config_keys(tmp_path):
    result = runner.invoke(app, ["link", "metformin", "--model", str(tmp_path / "nowhere")])
    assert result.exit_code == 1
    assert "--model" in said(result) and "encoder.model" not in said(result)
    result = runner.invoke(app, ["link", "metformin", "--index", str(tmp_path / "nowhere")])
    assert result.exit_code == 1
    assert "--index" in said(result) and "index.index" not in said(result)
    result = runner.invoke(app, ["link", "metformin", "--threshold", "1.5"])
    assert result.exit_code == 1 and "--threshold (1.5) must lie in [0, 1]" in said(result)
    result = runner.invoke(app, ["link", "--input", str(tmp_path / "nofile.jsonl")])
    assert result.exit_code == 1 and "nofile.jsonl' does not exist; give a JSONL or text file" in said(result)


def test_link_labels_the_ner_does_not_predict_name_the_flag(cli_index, tiny_model, tmp_path):
    import spacy

    nlp = spacy.blank("en")
    nlp.add_pipe("ner").add_label("Disease")
    nlp.initialize()
    nlp.to_disk(tmp_path / "ner")
    result = runner.invoke(app, ["link", "metformin", "--labels", "Gene", "--ner", str(tmp_path / "ner"),
                                 "--model", str(tiny_model), "--index", str(cli_index)])
    assert result.exit_code == 1 and "labels lists 'Gene'" in said(result)
    assert "fix --labels or leave it out" in said(result) and "sapbert_linker config" not in said(result)


def test_the_command_line_imports_where_there_is_no_fork_and_no_resource_module():
    """Windows has neither `resource` nor os.register_at_fork: every module the command line
    and the linker import must load without them."""
    import subprocess
    import sys

    code = """
import os, sys
sys.modules["resource"] = sys.modules["torch"] = None  # the runtime: no torch
del os.register_at_fork, os.fork
import spacy_sapbert.cli, spacy_sapbert.corpus.shards, spacy_sapbert.pipe.linker, spacy_sapbert.encoders.onnx
assert spacy_sapbert.corpus.shards._peak_rss_mb() == 0.0
"""
    subprocess.run([sys.executable, "-c", code], check=True)


def test_a_training_command_without_the_training_package_says_where_it_lives(monkeypatch):
    """Where only the runtime is installed, `spacy-sapbert evaluate …` answers in one sentence
    naming the training package, whatever its arguments."""
    import typer

    from spacy_sapbert import cli

    monkeypatch.setattr(cli, "app", typer.Typer())
    cli.app.command("info")(lambda: None)
    monkeypatch.setattr("importlib.metadata.entry_points", lambda group: [])
    cli._add_plugin_commands()
    result = CliRunner().invoke(cli.app, ["evaluate", "--dataset", "ncbi-disease", "--split", "dev"])
    assert result.exit_code == 1
    assert "training package" in result.output and "pip install -e training" in result.output
    assert len(result.output.strip().splitlines()) <= 3  # one sentence, as wrapped on a narrow terminal


def test_link_says_what_the_bundled_ner_covers_when_a_text_yields_nothing():
    """A clinical note's shorthand, where the bundled NER finds nothing to link: the table is
    empty and one line says what the NER covers and how to bring another (--ner)."""
    result = CliRunner().invoke(app, ["link", "Pt w/ HTN. c/o SOB x3d."])
    assert result.exit_code == 0, result.output
    hint = [line for line in result.stderr.splitlines() if "yielded no linked entity" in line]
    assert hint and "--ner" in result.stderr and "bundled NER finds Disease and Chemical" in result.stderr
    assert "yielded no linked entity" not in result.stdout  # stdout holds the table alone
    assert result.stdout.strip() == "No entity found."  # no empty table
    # An empty TEXT is one sentence, before any pipeline is made.
    empty = CliRunner().invoke(app, ["link", "  "])
    assert empty.exit_code == 1 and empty.output.strip().endswith("TEXT is empty; give the text to link, or --input FILE.")


def test_info_lists_the_named_knowledge_bases_within_a_terminal_s_width(tmp_path, monkeypatch):
    monkeypatch.setenv("SPACY_SAPBERT_CACHE", str(tmp_path))
    result = CliRunner().invoke(app, ["info"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert any(line.startswith("mesh ") for line in lines) and "818,353 names" in " ".join(result.stdout.split())
    assert max(len(line.rstrip()) for line in lines) <= 100


def test_the_command_line_shows_first_use_as_python_does():
    import logging

    from spacy_sapbert.cli import _CliFormatter

    def shown(name, level, message):
        return _CliFormatter().format(logging.LogRecord(name, level, __file__, 1, message, None, None))

    assert shown("spacy_sapbert.first_use", logging.INFO, "Built it in 1 s.") == "spacy-sapbert: Built it in 1 s."
    assert shown("spacy_sapbert.cache", logging.WARNING, "Damaged.") == "WARNING spacy_sapbert.cache: Damaged."

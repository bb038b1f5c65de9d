"""Output folders that cannot be one are refused before the work, not after it (issue 25).

``board-check --out FILE`` failed only after every engine was built and timed; ``distill`` with ``out_dir`` a file
failed at its first write, after the data and the teacher were loaded, and with ``out_dir`` the teacher's run
folder it resumed from the teacher's ``last.pt`` as if it were the student's and overwrote the teacher's
checkpoints.  (``deploy --results FILE`` is refused before connecting since commit db6e454: tests/deploy.)
"""

import pytest

from jetforge.errors import JetforgeError
from jetforge.output_set import check_output_folder


def test_an_output_folder_that_is_a_file_or_below_one_is_refused(tmp_path):
    a_file = tmp_path / "report.txt"
    a_file.write_text("keep")
    for target, words in ((a_file, "is a file, not a folder"), (a_file / "sub", "lies below")):
        with pytest.raises(JetforgeError) as err:
            check_output_folder(target, "--out")
        assert words in err.value.one_line() and str(a_file) in err.value.one_line()
    link = tmp_path / "link"
    link.symlink_to(a_file)
    with pytest.raises(JetforgeError, match="is a file"):
        check_output_folder(link, "--out")
    assert check_output_folder(tmp_path / "new" / "deeper", "--out") == tmp_path / "new" / "deeper"
    assert a_file.read_text() == "keep"


def test_board_check_refuses_an_out_that_is_a_file_before_opening_the_bundle(tmp_path, capsys):
    from jetforge.cli.main import main

    out = tmp_path / "board-check"
    out.write_text("a file the user keeps")
    # the bundle does not even exist: the output is judged first, so nothing is built or timed for nothing
    code = main(["board-check", str(tmp_path / "no-bundle"), "--out", str(out)])
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("jetforge:")]
    assert code == 1 and len(lines) == 1 and "is a file, not a folder" in lines[0]
    assert out.read_text() == "a file the user keeps"


def _distill_config(tmp_path, out_dir):
    pytest.importorskip("torch")
    from jetforge.compress.distill import DistillConfig
    from jetforge.compress.train.recipe import ModelConfig

    teacher = tmp_path / "runs" / "teacher"
    teacher.mkdir(parents=True)
    (teacher / "best.pt").write_bytes(b"the teacher's weights")
    (teacher / "last.pt").write_bytes(b"the teacher's last epoch")
    return DistillConfig(out_dir=str(out_dir), teacher=ModelConfig(checkpoint=str(teacher / "best.pt")),
                         model=ModelConfig(checkpoint=str(teacher / "best.pt"), prune_ratio=0.5)), teacher


def test_distill_refuses_the_teachers_run_folder_as_out_dir(tmp_path):
    from jetforge.compress.distill.distill_model import check_run_folder, distill

    cfg, teacher = _distill_config(tmp_path, tmp_path / "runs" / "teacher")
    with pytest.raises(JetforgeError) as err:
        check_run_folder(cfg)
    assert "checkpoint" in err.value.one_line() and "resume" in err.value.one_line()
    with pytest.raises(JetforgeError):
        distill(cfg)  # refused before any data is loaded or a file written
    assert sorted(p.name for p in teacher.iterdir()) == ["best.pt", "last.pt"]
    assert (teacher / "last.pt").read_bytes() == b"the teacher's last epoch"
    cfg.out_dir = str(tmp_path / "runs" / "student")
    assert check_run_folder(cfg) == tmp_path / "runs" / "student"


def test_distill_refuses_an_out_dir_that_is_a_file(tmp_path):
    from jetforge.compress.distill.distill_model import check_run_folder

    a_file = tmp_path / "out"
    a_file.write_text("keep")
    cfg, _ = _distill_config(tmp_path, a_file)
    with pytest.raises(JetforgeError, match="out_dir .* is a file, not a folder"):
        check_run_folder(cfg)

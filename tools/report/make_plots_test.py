"""make_plots.py on small fixture result files (tools/report/testdata): every
plot renders, states its labels, units, legend and machine, and is
byte-identical when rendered again; a plot missing any of them is refused.
Run by make_plots_test.sh with the test venv's Python (matplotlib).
"""
import json
import os
import pathlib
import shutil
import sys
import tempfile
import unittest

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent.parent / "deploy" / "tests"))
import collect_results  # noqa: E402
import junit  # noqa: E402
import make_plots  # noqa: E402
import results  # noqa: E402

FIXTURES = HERE / "testdata"


def figure(name):
    return make_plots.PLOTS[name][1](make_plots.load_doc(FIXTURES, name)[0])


class RendersFromFixtures(unittest.TestCase):
    def setUp(self):
        self.out = tempfile.mkdtemp()

    def tearDown(self):
        shutil.rmtree(self.out)

    def test_every_plot_renders_a_png(self):
        written = make_plots.render(str(FIXTURES), self.out)
        self.assertEqual(sorted(pathlib.Path(p).stem for p in written), sorted(make_plots.PLOTS))
        for p in written:
            head = pathlib.Path(p).read_bytes()[:8]
            self.assertEqual(head, b"\x89PNG\r\n\x1a\n", p)
            self.assertGreater(os.path.getsize(p), 10_000, p)

    def test_rendering_again_gives_the_same_bytes(self):
        first = make_plots.render(str(FIXTURES), self.out, {"kv_tiers", "planner_day"})
        again = make_plots.render(str(FIXTURES), os.path.join(self.out, "again"),
                                  {"kv_tiers", "planner_day"})
        for a, b in zip(first, again):
            self.assertEqual(pathlib.Path(a).read_bytes(), pathlib.Path(b).read_bytes(), a)

    def test_the_machine_line_names_cpu_date_and_commit(self):
        for name in make_plots.PLOTS:
            fig = figure(name)
            line = next(t.get_text() for t in fig.texts if t.get_text().startswith("Machine: "))
            doc = make_plots.load_doc(FIXTURES, name)[0]
            for field in ("cpu", "date", "commit"):
                self.assertIn(str(doc[field]), line, name)
            make_plots.plt.close(fig)

    @unittest.skipIf(shutil.which("dot") is None, "Graphviz's dot is not installed")
    def test_the_architecture_diagram_renders(self):
        path = make_plots.render_diagram(str(HERE.parent.parent / "docs" / "architecture.dot"),
                                         self.out)
        svg = pathlib.Path(path).read_text()
        for node in ("scheduler", "prefill worker", "MoQT relay", "decode worker", "KvPages"):
            self.assertIn(node, svg)


class RefusesUnlabelledPlots(unittest.TestCase):
    """Each element check_figure demands, removed from every plot in turn."""

    def assertRefused(self, mutate, expect):
        for name in make_plots.PLOTS:
            with self.subTest(plot=name):
                fig = figure(name)
                make_plots.check_figure(fig)  # complete as drawn
                mutate(fig)
                with self.assertRaises(make_plots.PlotError) as e:
                    make_plots.check_figure(fig)
                self.assertIn(expect, str(e.exception))
                make_plots.plt.close(fig)

    def test_missing_x_label(self):
        self.assertRefused(lambda f: f.axes[0].set_xlabel(""), "no x label")

    def test_missing_y_label(self):
        self.assertRefused(lambda f: f.axes[-1].set_ylabel(""), "no y label")

    def test_label_without_unit(self):
        self.assertRefused(lambda f: f.axes[0].set_ylabel("throughput"), "no unit")

    def test_missing_title(self):
        self.assertRefused(lambda f: f.suptitle(""), "no title")

    def test_title_running_off_the_figure(self):
        self.assertRefused(lambda f: f.suptitle("a title far too long " * 8), "runs off")

    def test_notes_on_top_of_each_other(self):
        self.assertRefused(lambda f: f.text(0.02, 0.012, "a note on the machine line"),
                           "overlaps")

    def test_missing_legend(self):
        def drop(f):
            for ax in f.axes:
                if ax.get_legend() is not None:
                    ax.get_legend().remove()
        self.assertRefused(drop, "no legend")

    def test_missing_machine(self):
        def drop(f):
            for t in list(f.texts):
                if t.get_text().startswith("Machine: "):
                    t.remove()
        self.assertRefused(drop, "no machine line")


class ResultFiles(unittest.TestCase):
    def test_a_result_file_without_its_commit_is_refused(self):
        doc = json.loads((FIXTURES / "kv_tiers.json").read_text())
        del doc["commit"]
        with tempfile.NamedTemporaryFile("w", suffix=".json") as f:
            json.dump(doc, f)
            f.flush()
            with self.assertRaisesRegex(results.ResultError, "lacks commit"):
                results.load(f.name)

    def test_collect_gathers_each_run_of_a_script(self):
        with tempfile.TemporaryDirectory() as d:
            pathlib.Path(d, "reuse.json").write_text(json.dumps({"ttft_ms": {"p50": 54}}))
            pathlib.Path(d, "abr.json").write_text('{"log": 1}\n{"seconds": 3.6}\n')  # JSON lines
            pathlib.Path(d, "notes.txt").write_text("not a run")
            out = os.path.join(d, "out.json")
            self.assertEqual(collect_results.main(["disagg_bench", out, d, "tools/x.sh 10",
                                                   "high_mbps=200", "low_from_s=1.5",
                                                   "shaper=tbf"]), 0)
            doc = results.load(out)
            self.assertEqual(collect_results.main(["t", out, d, "x", "no-equals"]), 2)
        self.assertEqual(doc["tool"], "disagg_bench")
        self.assertEqual((doc["high_mbps"], doc["low_from_s"], doc["shaper"]), (200, 1.5, "tbf"))
        self.assertEqual(doc["command"], "tools/x.sh 10")
        self.assertEqual(doc["results"], [{"seconds": 3.6, "run": "abr"},
                                          {"ttft_ms": {"p50": 54}, "run": "reuse"}])

    def test_header_and_write_round_trip(self):
        head = results.header("t", ["tools/x.sh", "a b"])
        self.assertEqual(head["command"], "tools/x.sh 'a b'")
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "r.json")
            results.write(path, head, [{"v": 1}], rounds=3)
            doc = results.load(path)
        self.assertEqual(doc["results"], [{"v": 1}])
        self.assertEqual(doc["rounds"], 3)
        self.assertRegex(doc["date"], r"^\d{4}-\d\d-\d\d$")


if __name__ == "__main__":
    junit.main(__name__)

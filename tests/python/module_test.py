"""The Python module's API without evaluating anything (seconds): it loads without libtorch, the
static checker finds exactly the rules examples/solutions/expected.json names, evaluator settings
go through the settings schema (defaults of both profiles, refusals naming the setting), requests
are checked strictly, rewards match docs/rewards.md's formulas, and errors are kbrl's exceptions.

    python module_test.py --source <checkout> --work <scratch dir>   (PYTHONPATH holds kbrl*.so)
"""
import argparse
import json
import os
import sys
import unittest

ARGS = None


def solutions():
    folder = os.path.join(ARGS.source, "examples", "solutions")
    with open(os.path.join(folder, "expected.json")) as f:
        expected = json.load(f)
    return folder, expected


class ModuleLoads(unittest.TestCase):
    def test_no_libtorch(self):
        import kbrl  # noqa: F401
        with open("/proc/self/maps") as f:
            maps = f.read()
        self.assertNotIn("libtorch", maps, "importing kbrl mapped libtorch")
        self.assertNotIn("torch", sys.modules)

    def test_version_and_exceptions(self):
        import kbrl
        self.assertRegex(kbrl.__version__, r"^\d+\.\d+\.\d+$")
        self.assertTrue(issubclass(kbrl.Error, RuntimeError))
        for cls in (kbrl.ConfigError, kbrl.InvalidArgument):
            self.assertTrue(issubclass(cls, kbrl.Error))
            self.assertTrue(issubclass(cls, ValueError))


class StaticChecker(unittest.TestCase):
    def test_bundled_solutions_get_exactly_the_expected_rules(self):
        import kbrl
        folder, expected = solutions()
        problems = {p["number"]: p for p in kbrl.load_problems(os.path.join(ARGS.source, "examples", "problems"))}
        for file, want in expected.items():
            with self.subTest(file=file):
                number = int(file.split("_")[3])
                with open(os.path.join(folder, file)) as f:
                    source = f.read()
                findings = kbrl.static_check(source, language="cpp", reference_source=problems[number]["source"])
                errors = {f["rule"] for f in findings if f["severity"] == "error"}
                self.assertEqual(errors, set(want.get("static_rules", [])))
                self.assertEqual(kbrl.has_errors(findings), bool(want.get("static_rules")))
                for f in findings:
                    self.assertEqual(set(f), {"rule", "category", "severity", "line", "message"})

    def test_severity_overrides_config_and_file(self):
        import kbrl
        folder, _ = solutions()
        with open(os.path.join(folder, "level_1_problem_2_sample_2_kernel.py")) as f:
            source = f.read()
        base = {f["rule"] for f in kbrl.static_check(source, language="cpp") if f["severity"] == "error"}
        self.assertIn("missing_kernel", base)
        off = kbrl.static_check(source, language="cpp", severity={"missing_kernel": "off"})
        self.assertNotIn("missing_kernel", {f["rule"] for f in off})
        warn = kbrl.static_check(source, {"language": "cpp", "severity": {"missing_kernel": "warning"}})
        self.assertEqual([f["severity"] for f in warn if f["rule"] == "missing_kernel"], ["warning"])
        path = os.path.join(ARGS.work, "severity.json")
        with open(path, "w") as f:
            json.dump({"severity": {"missing_kernel": "off"}}, f)
        self.assertNotIn("missing_kernel", {f["rule"] for f in kbrl.static_check(source, path, language="cpp")})
        # keyword severities go over the file's
        on_again = kbrl.static_check(source, path, language="cpp", severity={"missing_kernel": "error"})
        self.assertIn("missing_kernel", {f["rule"] for f in on_again})

    def test_bad_config_names_the_field(self):
        import kbrl
        with self.assertRaisesRegex(kbrl.InvalidArgument, "no_such_rule"):
            kbrl.static_check("x = 1", severity={"no_such_rule": "off"})
        with self.assertRaisesRegex(ValueError, "sometimes"):
            kbrl.static_check("x = 1", severity={"missing_kernel": "sometimes"})
        with self.assertRaisesRegex(kbrl.InvalidArgument, "languag"):
            kbrl.static_check("x = 1", {"languag": "cpp"})
        with self.assertRaises(kbrl.ConfigError):
            kbrl.static_check("x = 1", os.path.join(ARGS.work, "missing.json"))
        rules = {r["name"] for r in kbrl.static_check_rules()}
        self.assertIn("missing_kernel", rules)


class EvaluatorSettings(unittest.TestCase):
    def make(self, *args, **kwargs):
        import kbrl
        kwargs.setdefault("work_dir", os.path.join(ARGS.work, "evaluator"))
        ev = kbrl.LocalEvaluator(*args, **kwargs)
        self.addCleanup(ev.close)
        return ev

    def test_profiles_give_the_schema_defaults(self):
        import kbrl
        schema = {s["key"]: s for s in kbrl.evaluator_settings()}
        self.assertEqual(schema["timing_trials"]["default_training"], 20)
        self.assertEqual(schema["timing_trials"]["default_evaluation"], 100)
        self.assertEqual(self.make().settings["timing_trials"], 20)
        self.assertEqual(self.make(profile="evaluation").settings["timing_trials"], 100)
        with self.assertRaisesRegex(kbrl.InvalidArgument, "profile"):
            self.make(profile="fast")

    def test_values_of_every_type_reach_the_settings(self):
        ev = self.make({"timing_trials": 7, "seed": 3}, device="cpu", gpus=[0, 1], atol=1e-3, input_families=False,
                       static_check_severity={"missing_kernel": "warning"}, compile_timeout_s=30, sandbox="off",
                       workers=1)  # an alias of compile_workers
        s = ev.settings
        self.assertEqual((s["timing_trials"], s["seed"], s["gpus"], s["atol"]), (7, 3, [0, 1], 1e-3))
        self.assertEqual((s["input_families"], s["compile_timeout_s"], s["sandbox"]), (False, 30.0, "off"))
        self.assertEqual(s["static_check_severity"], {"missing_kernel": "warning"})
        self.assertEqual(s["compile_workers"], 1)
        self.assertIsNone(s["rtol"])
        self.assertEqual(str(ev.work_dir), os.path.join(ARGS.work, "evaluator"))
        self.assertTrue(os.path.isfile(ev.worker_script) and os.path.basename(ev.worker_script) == "kbrl_worker.py")
        self.assertEqual(self.make(python="/opt/python3", worker_script=ev.worker_script).python, "/opt/python3")
        # keyword arguments go over the dict
        self.assertEqual(self.make({"timing_trials": 7}, timing_trials=9).settings["timing_trials"], 9)

    def test_refusals_name_the_setting(self):
        import kbrl
        cases = [({"timing_trail": 3}, "unknown evaluator setting 'timing_trail'"),
                 ({"timing_trials": 0}, "'timing_trials': 0 is below 1"),
                 ({"timing_trials": "many"}, "'timing_trials': expected an integer"),
                 ({"device": "tpu"}, "'device'"),
                 ({"static_check_severity": {"nope": "off"}}, "unknown static-check rule 'nope'"),
                 ({"compile_timeout_s": float("inf")}, "'compile_timeout_s': expected a number"),
                 ({"timing_trials": object()}, "'timing_trials'")]
        for settings, message in cases:
            with self.subTest(settings=settings):
                with self.assertRaises(kbrl.InvalidArgument) as caught:
                    self.make(**settings)
                self.assertIn(message, str(caught.exception))

    def test_requests_are_checked_strictly(self):
        import kbrl
        ev = self.make(device="cpu")
        problem = {"id": "p", "source": "import torch\nclass Model(torch.nn.Module): pass\n"}
        cases = [([{"problem": problem, "candidate_source": "", "languag": "cpp"}], "requests[0]: field 'languag': unknown key"),
                 ([{"candidate_source": ""}], "field 'problem': missing"),
                 ([{"problem": problem}], "field 'candidate_source': missing"),
                 ([{"problem": dict(problem, sauce="x"), "candidate_source": ""}], "field 'problem.sauce'"),
                 ([{"problem": problem, "candidate_source": "", "options": {"timing_trial": 1}}], "options.timing_trial"),
                 ([{"problem": problem, "candidate_source": "", "language": "fortran"}], "fortran"),
                 ([{"problem": problem, "candidate_source": 3}], "candidate_source"),
                 ([{"problem": dict(problem, content_hash="0" * 64), "candidate_source": ""}],
                  "field 'problem.content_hash': does not match the source"),
                 (["not a dict"], "requests[0]: expected a dict")]
        for requests, message in cases:
            with self.subTest(message=message):
                with self.assertRaises(kbrl.InvalidArgument if "expected a dict" in message else ValueError) as caught:
                    ev.evaluate(requests)
                self.assertIn(message, str(caught.exception))
        self.assertEqual(ev.stats()["submitted"], 0)  # refused before anything was queued
        ev.close()
        with self.assertRaisesRegex(kbrl.Error, "closed"):
            ev.evaluate([])


    def test_remote_evaluator_configuration(self):
        import kbrl
        with self.assertRaisesRegex(kbrl.InvalidArgument, "ftp://somewhere"):
            kbrl.RemoteEvaluator(["ftp://somewhere:1"])
        with self.assertRaisesRegex(kbrl.InvalidArgument, "'gpus' is the servers'"):
            kbrl.RemoteEvaluator(["http://127.0.0.1:1"], gpus=[0])
        with self.assertRaisesRegex(kbrl.InvalidArgument, "'timing_trials': 0 is below 1"):
            kbrl.RemoteEvaluator(["http://127.0.0.1:1"], timing_trials=0)
        with kbrl.RemoteEvaluator("http://127.0.0.1:1,http://127.0.0.1:2", {"seed": 7}, profile="evaluation") as ev:
            self.assertEqual((ev.settings["seed"], ev.settings["timing_trials"]), (7, 100))
            self.assertNotIn("device", ev.settings)
            with self.assertRaisesRegex(ValueError, "field 'problem': missing"):
                ev.evaluate([{"candidate_source": ""}])


    def test_make_evaluator_picks_the_evaluator_the_settings_describe(self):
        import kbrl
        local = kbrl.make_evaluator({"device": "cpu"}, work_dir=os.path.join(ARGS.work, "evaluator"))
        self.addCleanup(local.close)
        self.assertIsInstance(local, kbrl.LocalEvaluator)
        remote = kbrl.make_evaluator({"endpoints": "http://127.0.0.1:1", "timing_trials": 3, "device": "cuda"})
        self.addCleanup(remote.close)
        self.assertIsInstance(remote, kbrl.RemoteEvaluator)
        self.assertEqual(remote.settings["timing_trials"], 3)
        with kbrl.RemoteEvaluator(settings={"endpoints": "http://127.0.0.1:1,http://127.0.0.1:2"}) as from_settings:
            import time
            deadline = time.monotonic() + 10  # the client learns its servers on its own thread
            while len(from_settings.servers()) < 2 and time.monotonic() < deadline:
                time.sleep(0.05)
            self.assertEqual(from_settings.servers(), {"http://127.0.0.1:1": 0, "http://127.0.0.1:2": 0})
        with self.assertRaisesRegex(kbrl.InvalidArgument, "'endpoints' names kbrl-evald servers"):
            self.make(endpoints="http://127.0.0.1:1")
        with self.assertRaisesRegex(kbrl.InvalidArgument, "endpoints"):
            kbrl.make_evaluator(endpoints="ftp://x:1")

    def test_waiting_times_out_is_interruptible_and_never_hangs(self):
        import kbrl
        import signal
        import threading
        import time
        request = {"problem": {"id": "p", "source": "import torch\nclass Model(torch.nn.Module): pass\n"},
                   "candidate_source": "class ModelNew: pass\n"}
        # No server listens on port 1: requests wait for one until give_up_after_s.
        with kbrl.RemoteEvaluator(["http://127.0.0.1:1"], language="cpp", give_up_after_s=60) as ev:
            future = ev.submit(request)
            t0 = time.monotonic()
            with self.assertRaises(TimeoutError):
                future.result(timeout=0.3)
            self.assertLess(time.monotonic() - t0, 5)
            self.assertFalse(future.done())
            timer = threading.Timer(0.3, lambda: os.kill(os.getpid(), signal.SIGINT))
            timer.start()
            t0 = time.monotonic()
            with self.assertRaises(KeyboardInterrupt):
                ev.evaluate([request])
            timer.join()
            self.assertLess(time.monotonic() - t0, 5)
        # closing answered what was pending
        self.assertEqual(future.result(timeout=10)["error_category"], "internal")
        with kbrl.RemoteEvaluator(["http://127.0.0.1:1"], language="cpp", give_up_after_s=0.5) as ev:
            t0 = time.monotonic()
            [result] = ev.evaluate([request])
            self.assertEqual(result["error_category"], "internal")
            self.assertLess(time.monotonic() - t0, 10)


class Rewards(unittest.TestCase):
    RESULT = {"format_ok": True, "static_ok": True, "compiled": True, "correctness": False, "trials_passed": 1,
              "trials_total": 4, "error_category": "correctness", "static_findings": []}
    ANSWER = "<think>plan</think>\n<KERNEL>\n```python\nclass ModelNew:\n    pass\n```\n</KERNEL>"

    def test_presets_follow_the_documented_formulas(self):
        import kbrl
        self.assertEqual(set(kbrl.RewardConfig.presets()), {"default", "stage1", "stage2", "stage3", "sparse", "kevin",
                                                             "kbrl_stage1", "kbrl_stage2", "kbrl_stage3", "kbrl_sparse"})
        # kernel_rl's stage 2: 0.1 format + 0.2 compiled + 0.7 * 1/4 trials + 0.05 * (a kernel of 26
        # characters, under 500: 1)
        self.assertAlmostEqual(kbrl.compute_reward(self.RESULT, self.ANSWER, "stage2")["total"], 0.1 + 0.2 + 0.7 * 0.25 + 0.05)
        self.assertEqual(kbrl.RewardConfig().name, "default")
        b = kbrl.compute_reward(self.RESULT, self.ANSWER, "kbrl_stage2")
        self.assertAlmostEqual(b["total"], 0.1 + 0.2 + 0.7 * 0.25)
        self.assertEqual(b["values"], {"format": 1.0, "compile": 1.0, "correctness": 0.25})
        self.assertAlmostEqual(kbrl.compute_reward(self.RESULT, self.ANSWER, "kbrl_stage1")["total"], 0.4 + 0.4 + 0.2 * 0.25)
        no_kernel = kbrl.compute_reward(dict(self.RESULT, compiled=False, trials_passed=0), "no code here", "kbrl_stage2")
        self.assertEqual(no_kernel["total"], 0.0)
        hack = kbrl.compute_reward(dict(self.RESULT, static_ok=False, error_category="static_check"), self.ANSWER, "kbrl_stage2")
        self.assertTrue(hack["zeroed_by_static_check"])
        self.assertEqual(hack["total"], 0.0)

    def test_config_from_a_mapping_and_its_round_trip(self):
        import kbrl
        config = kbrl.RewardConfig({"preset": "kbrl_stage2", "weights": {"format": 0.5}, "clip": {"max": 0.9}})
        self.assertEqual(config.name, "kbrl_stage2")
        b = config.breakdown(dict(self.RESULT, correctness=True, trials_passed=4), self.ANSWER)
        self.assertEqual((b["unclipped"], b["total"], b["clipped"]), (1.4, 0.9, True))
        self.assertEqual(kbrl.RewardConfig(config.to_dict()).to_dict(), config.to_dict())
        self.assertEqual(config.reward(self.RESULT, self.ANSWER), kbrl.compute_reward(self.RESULT, self.ANSWER, config)["total"])
        # the length term reads num_tokens
        lengthy = kbrl.RewardConfig({"preset": "kbrl_stage2", "weights": {"length": 1.0},
                                     "length": {"target_tokens": 10, "limit_tokens": 20}})
        self.assertAlmostEqual(lengthy.breakdown(self.RESULT, self.ANSWER, num_tokens=15)["values"]["length"], -0.5)
        self.assertEqual(lengthy.breakdown(self.RESULT, self.ANSWER, num_tokens=5)["values"]["length"], 0.0)

    def test_bad_configs_name_the_field(self):
        import kbrl
        with self.assertRaisesRegex(kbrl.ConfigError, "weights.formatt"):
            kbrl.RewardConfig({"preset": "stage2", "weights": {"formatt": 1.0}})
        with self.assertRaisesRegex(ValueError, "stage9"):
            kbrl.RewardConfig("stage9")
        with self.assertRaisesRegex(kbrl.InvalidArgument, "result"):
            kbrl.compute_reward(dict(self.RESULT, compiled="yes"), self.ANSWER)


class ProblemsAndAnswers(unittest.TestCase):
    def test_problems_prompts_and_parsing(self):
        import kbrl
        problems = kbrl.load_problems(os.path.join(ARGS.source, "examples", "problems"))
        self.assertEqual(len(problems), 15)
        p = problems[0]
        self.assertEqual(set(p), {"id", "level", "number", "name", "source", "content_hash", "origin", "needs_weights"})
        one = kbrl.load_problem_file(os.path.join(ARGS.source, "examples", "problems", "5_RMSNorm.py"), level=1)
        self.assertEqual((one["number"], one["name"], one["level"]), (5, "RMSNorm", 1))
        messages = kbrl.build_messages(p, language="cpp")
        self.assertEqual([m["role"] for m in messages], ["system", "user"])
        self.assertIn("class Model", messages[1]["content"])
        parsed = kbrl.parse_completion(Rewards.ANSWER)
        self.assertEqual((parsed["thinking"], parsed["format_ok"], parsed["has_kernel_block"]), ("plan", True, True))
        self.assertEqual(parsed["kernel"].strip(), "class ModelNew:\n    pass")
        with self.assertRaises(kbrl.ConfigError):
            kbrl.load_problems(os.path.join(ARGS.work, "no-such-folder"))

    def test_summary(self):
        import kbrl
        results = [dict(Rewards.RESULT, problem_id="a", correctness=True, error_category="none", speedup=2.0),
                   dict(Rewards.RESULT, problem_id="a")]
        s = kbrl.summarize(results)
        self.assertEqual((s["total"], s["correct"], s["correct_rate"]), (2, 1, 0.5))


def main():
    global ARGS
    parser = argparse.ArgumentParser()
    parser.add_argument("--source", required=True)
    parser.add_argument("--work", required=True)
    ARGS, rest = parser.parse_known_args()
    os.makedirs(ARGS.work, exist_ok=True)
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)


if __name__ == "__main__":
    main()

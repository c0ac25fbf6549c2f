"""verl reward functions that score a response's kernel with kbrl.

    custom_reward_function.path=examples/python/verl_reward.py
    custom_reward_function.name=compute_score          # verl's naive reward manager, one response per call
    # or, with reward_model.reward_manager=batch:  custom_reward_function.name=compute_score_batch

Data rows: data_source "kernelbench", reward_model.ground_truth = the problem's reference program
(its `source`), extra_info.problem_id = its id. The evaluator is made on first use from
KBRL_EVALUATOR_SETTINGS (a JSON dict of evaluator settings; default {"device": "cuda"};
{"endpoints": ...} evaluates on kbrl-evald servers); the reward preset comes from KBRL_REWARD.
"""
import json
import os

import kbrl

LANGUAGE = os.environ.get("KBRL_LANGUAGE", "cuda")
REWARD = kbrl.RewardConfig(os.environ.get("KBRL_REWARD", "kbrl_stage2"))
_evaluator = None


def evaluator():
    global _evaluator
    if _evaluator is None:
        # A LocalEvaluator, or with {"endpoints": ...} a RemoteEvaluator on kbrl-evald servers.
        _evaluator = kbrl.make_evaluator(json.loads(os.environ.get("KBRL_EVALUATOR_SETTINGS", '{"device": "cuda"}')))
    return _evaluator


def _score(result, solution_str):
    # verl takes a dict: "score" is the reward, the other entries are logged as extra info.
    return {"score": REWARD.reward(result, solution_str), "correct": float(result["correctness"]),
            "compiled": float(result["compiled"]), "speedup": result["speedup"] or 0.0}


def _request(data_source, solution_str, ground_truth, extra_info):
    problem = {"id": (extra_info or {}).get("problem_id", data_source), "source": ground_truth}
    return {"problem": problem, "language": LANGUAGE, "candidate_source": kbrl.parse_completion(solution_str)["kernel"]}


def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    result = evaluator().evaluate([_request(data_source, solution_str, ground_truth, extra_info)])[0]
    return _score(result, solution_str)


def compute_score_batch(data_sources, solution_strs, ground_truths, extra_infos, **kwargs):
    # The whole batch at once, so its kernels build and run in parallel.
    results = evaluator().evaluate([_request(*row) for row in zip(data_sources, solution_strs, ground_truths, extra_infos)])
    return [_score(r, s) for r, s in zip(results, solution_strs)]

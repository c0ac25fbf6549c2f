"""A TRL reward function that scores each completion's kernel with kbrl.

    from trl import GRPOConfig, GRPOTrainer
    from trl_reward import kernel_reward, dataset_rows
    train = datasets.Dataset.from_list(dataset_rows(kbrl.load_problems("KernelBench/KernelBench/level1")))
    trainer = GRPOTrainer(model=..., reward_funcs=[kernel_reward], train_dataset=train, args=GRPOConfig(...))

Each dataset row carries its problem (a dict from kbrl.load_problems); TRL hands the extra columns
to reward functions as keyword arguments, one list entry per completion. The evaluator is made on
first use from KBRL_EVALUATOR_SETTINGS (a JSON dict of evaluator settings, kbrl-train's
`evaluator.*` keys; default {"device": "cuda"}; {"endpoints": "http://gpu-0:8470,..."} evaluates on
kbrl-evald servers); the reward preset comes from KBRL_REWARD.
"""
import json
import os

import kbrl

LANGUAGE = os.environ.get("KBRL_LANGUAGE", "cuda")
REWARD = kbrl.RewardConfig(os.environ.get("KBRL_REWARD", "kbrl_stage2"))
_evaluator = None


def evaluator():
    global _evaluator
    if _evaluator is None:  # not at import: TRL imports this in processes that never score
        # A LocalEvaluator, or with {"endpoints": ...} a RemoteEvaluator on kbrl-evald servers.
        _evaluator = kbrl.make_evaluator(json.loads(os.environ.get("KBRL_EVALUATOR_SETTINGS", '{"device": "cuda"}')))
    return _evaluator


def dataset_rows(problems, language=LANGUAGE):
    """TRL's conversational prompt format, one row per problem."""
    return [{"prompt": kbrl.build_messages(p, language=language), "problem": p} for p in problems]


def kernel_reward(prompts, completions, problem, completion_ids=None, **kwargs) -> list[float]:
    # Conversational datasets give [{"role": "assistant", "content": ...}], standard ones a str.
    texts = [c if isinstance(c, str) else c[-1]["content"] for c in completions]
    requests = [{"request_id": f"trl-{i}", "problem": p, "language": LANGUAGE,
                 "candidate_source": kbrl.parse_completion(text)["kernel"]}
                for i, (p, text) in enumerate(zip(problem, texts))]
    results = evaluator().evaluate(requests)  # all at once: builds run in parallel, the GIL is released
    lengths = [len(ids) for ids in completion_ids] if completion_ids is not None else [None] * len(texts)
    return [REWARD.reward(r, text, num_tokens=n) for r, text, n in zip(results, texts, lengths)]

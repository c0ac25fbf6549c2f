// What training needs from the decoder beyond inference (part of kbrl::torch): per-token
// log-probabilities of given targets, differentiable and without materialising [B, T, vocab],
// and activation checkpointing, which libtorch's C++ API lacks.
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <vector>

#include "kbrl/model/torch/decoder.hpp"

namespace kbrl::model {

// log_softmax(logits[b, t])[targets[b, t]] for every position: [B, T] float32 (float64 for a
// float64 model), differentiable with respect to every model tensor that requires grad (the
// LoRA adapters). input_ids, attention_mask (1 real, 0 padding; padding on either side;
// undefined: all real) and targets are [B, T]; targets[b, t] is the token whose probability
// position t predicts (usually input_ids[b, t + 1]). Padding positions give 0 and their
// targets are ignored. Logits are computed options.logprob_chunk_tokens tokens at a time, in
// the model's dtype, then log-softmaxed in fp32; neither pass holds more than one chunk's
// [chunk, vocab] logits. With a frozen lm_head (LoRA) the forward also computes each chunk's
// gradient with respect to the hidden states, (onehot - softmax) W, and keeps only that
// [chunk, hidden]; a trainable head's chunks are recomputed in backward instead.
at::Tensor token_logprobs(const DecoderModel& model, const at::Tensor& input_ids, const at::Tensor& attention_mask,
                          const at::Tensor& targets, const TrainForwardOptions& options = {});

// Activation checkpointing: fn(input) computed without keeping its intermediate tensors;
// backward runs fn again with grad enabled, from the same random-number state (same dropout
// masks), and returns gradients for `input` and `params`. `params` must list every tensor that
// requires grad that fn reads besides input (fn may read other tensors, which get no gradient).
// Without grad mode, or when nothing requires grad, this is fn(input). fn and what it refers to
// must outlive the backward pass.
at::Tensor checkpoint(std::function<at::Tensor(const at::Tensor&)> fn, const at::Tensor& input,
                      const std::vector<at::Tensor>& params);

}  // namespace kbrl::model

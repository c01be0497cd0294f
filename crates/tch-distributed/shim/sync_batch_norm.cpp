// SyncBatchNorm: batch normalisation whose training statistics span every rank's batch.
//
// Forward, per channel c over the (N, H, W) elements of every rank:
//   each rank computes n (its element count), sum(x) and sum(x^2) and one SUM all-reduce
//   of [sum(x) | sum(x^2) | n] gives the global values; then
//   mean = S1 / N, var = S2 / N - mean^2 (biased, used to normalise),
//   y = (x - mean) / sqrt(var + eps) * weight + bias,
//   running = (1 - momentum) * running + momentum * stat, with the unbiased variance
//   var * N / (N - 1) for running_var, as plain batch norm does.
// Backward, with xhat = (x - mean) * invstd:
//   each rank computes sum(dy) and sum(dy * (x - mean)); one SUM all-reduce gives the
//   global sums, and
//   dx = weight * invstd * (dy - sum(dy)/N - (x - mean) * invstd^2 * sum(dy*(x-mean))/N),
//   which is batch norm's input gradient over the global batch, sliced to this rank.
//   dweight = sum(dy * xhat) and dbias = sum(dy) are this rank's LOCAL sums (not
//   reduced): summed over ranks they are exactly the global-batch gradients, and DDP
//   all-reduces parameter gradients itself, so reducing them here would count every
//   rank's share world_size times (see src/sync_batch_norm.rs).
//
// Unlike PyTorch's module, this works on any device (CPU ranks with Gloo included): it
// uses only plain ATen ops and the group's ProcessGroup.
#include "tchd_internal.h"

#include <optional>
#include <vector>

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Statistics are accumulated and communicated in double: they are only 2C+1 numbers,
// and sum(x^2) / N - mean^2 loses everything to cancellation in float when |mean| >> std.
constexpr auto kAcc = at::kDouble;

// A C-vector viewed so that it broadcasts over (N, C, H, W).
at::Tensor channels_view(const at::Tensor& v, at::ScalarType dtype) {
  return v.to(dtype).view({1, -1, 1, 1});
}

// Sum over every dimension but the channel one, accumulated in double.
at::Tensor channel_sum(const at::Tensor& t) {
  return at::sum(t, {0, 2, 3}, /*keepdim=*/false, kAcc);
}

void all_reduce_sum(const c10::intrusive_ptr<c10d::ProcessGroup>& pg, at::Tensor& t) {
  std::vector<at::Tensor> ts{t};
  c10d::AllreduceOptions opts;
  opts.reduceOp = c10d::ReduceOp(c10d::ReduceOp::SUM);
  pg->allreduce(ts, opts)->wait();
}

// The arguments of the autograd function that never get a gradient. The running
// statistics travel here rather than as tensor arguments so that autograd does not
// treat them as inputs (and so that they may be absent).
struct SyncParams {
  c10::intrusive_ptr<c10d::ProcessGroup> pg;
  at::Tensor running_mean;
  at::Tensor running_var;
  double momentum;
  double eps;
};

// Autograd numbers the gradient slots of present tensor arguments only, so an absent
// weight moves the bias from slot 2 to slot 1.
size_t bias_slot(bool has_weight) { return has_weight ? 2 : 1; }

class SyncBatchNormFn : public torch::autograd::Function<SyncBatchNormFn> {
 public:
  // Autograd runs this with gradient recording off, so the in-place running-stat
  // updates below are not part of any graph. weight and bias are optionals because
  // autograd accepts absent optionals as arguments but not undefined tensors.
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& input,
                            const std::optional<at::Tensor>& weight_opt,
                            const std::optional<at::Tensor>& bias_opt, const SyncParams& p) {
    const at::Tensor weight = weight_opt.value_or(at::Tensor());
    const at::Tensor bias = bias_opt.value_or(at::Tensor());
    const at::Tensor& running_mean = p.running_mean;
    const at::Tensor& running_var = p.running_var;
    const int64_t channels = input.size(1);
    const int64_t local_n = input.numel() / channels;
    const auto dtype = input.scalar_type();

    // Centre on this rank's own mean (rounded to the input dtype) before squaring, so
    // the squares are small, then undo the shift exactly in double:
    //   sum(x^2) = sum((x-s)^2) + 2 s sum(x) - n s^2   for any s.
    // A rank with an empty batch contributes zeros (and shifts by 0).
    at::Tensor local_sum = channel_sum(input);
    at::Tensor shift = local_n > 0 ? (local_sum / static_cast<double>(local_n)).to(dtype)
                                   : at::zeros({channels}, input.options());
    at::Tensor centred = input - shift.view({1, -1, 1, 1});
    at::Tensor s = shift.to(kAcc);
    at::Tensor local_sq = channel_sum(centred.square()) + 2.0 * s * local_sum -
                          static_cast<double>(local_n) * s * s;

    // One collective for everything: [sum(x) | sum(x^2) | n].
    at::Tensor stats = at::cat({local_sum, local_sq,
                                at::full({1}, static_cast<double>(local_n),
                                         local_sum.options())});
    all_reduce_sum(p.pg, stats);
    // Every rank now holds the same numbers, so every rank takes the same branch below.
    const double n = stats[2 * channels].item<double>();
    TORCH_CHECK_VALUE(n > 1, "SyncBatchNorm: expected more than 1 value per channel when "
                      "training, got ", n, " over all ranks (this rank's input is ",
                      input.sizes(), ")");
    at::Tensor mean = stats.narrow(0, 0, channels) / n;
    at::Tensor var = (stats.narrow(0, channels, channels) / n - mean * mean).clamp_min(0.0);
    at::Tensor invstd = (var + p.eps).rsqrt();

    // y = (x - s) * scale + (bias + (s - mean) * scale), reusing the centred input.
    at::Tensor scale = weight.defined() ? invstd * weight.to(kAcc) : invstd;
    at::Tensor offset = (s - mean) * scale;
    if (bias.defined()) offset = offset + bias.to(kAcc);
    at::Tensor output = centred * channels_view(scale, dtype) + channels_view(offset, dtype);

    if (running_mean.defined()) {
      running_mean.mul_(1.0 - p.momentum).add_(mean.to(running_mean.scalar_type()), p.momentum);
    }
    if (running_var.defined()) {
      at::Tensor unbiased = var * (n / (n - 1.0));
      running_var.mul_(1.0 - p.momentum).add_(unbiased.to(running_var.scalar_type()), p.momentum);
    }

    ctx->save_for_backward({input, weight, mean, invstd});
    ctx->saved_data["n"] = n;
    ctx->saved_data["has_weight"] = weight.defined();
    ctx->saved_data["has_bias"] = bias.defined();
    // The capsule keeps the group alive until backward ran, even if the caller destroys
    // its handle (destroy_process_group) in between.
    ctx->saved_data["pg"] = c10::IValue::make_capsule(p.pg);
    return output;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& input = saved[0];
    const at::Tensor& weight = saved[1];
    const at::Tensor& mean = saved[2];
    const at::Tensor& invstd = saved[3];
    const double n = ctx->saved_data["n"].toDouble();
    const bool has_weight = ctx->saved_data["has_weight"].toBool();
    const bool has_bias = ctx->saved_data["has_bias"].toBool();
    auto pg = c10::static_intrusive_pointer_cast<c10d::ProcessGroup>(
        ctx->saved_data["pg"].toCapsule());
    const at::Tensor& dy = grads[0];
    const auto dtype = input.scalar_type();

    // As in forward: work on x - m with m = mean rounded to the input dtype, and correct
    // exactly in double: sum(dy (x - mean)) = sum(dy (x - m)) + (m - mean) sum(dy).
    at::Tensor m = mean.to(dtype);
    at::Tensor m_err = m.to(kAcc) - mean;
    at::Tensor centred = input - m.view({1, -1, 1, 1});
    at::Tensor sum_dy = channel_sum(dy);
    at::Tensor sum_dy_xmu = channel_sum(dy * centred) + m_err * sum_dy;

    at::Tensor grad_input, grad_weight, grad_bias;
    // Local sums, see the top of this file for why they are not reduced.
    if (has_weight && ctx->needs_input_grad(1)) {
      grad_weight = (sum_dy_xmu * invstd).to(weight.scalar_type());
    }
    // Autograd casts a gradient to its input's dtype if needed.
    if (has_bias && ctx->needs_input_grad(bias_slot(has_weight))) grad_bias = sum_dy.to(dtype);

    // Every rank holds the same model, so all of them agree on whether this collective
    // happens (as in PyTorch, it is skipped when no rank needs the input gradient).
    if (ctx->needs_input_grad(0)) {
      at::Tensor global = at::cat({sum_dy, sum_dy_xmu});
      all_reduce_sum(pg, global);
      const int64_t channels = sum_dy.size(0);
      at::Tensor mean_dy = global.narrow(0, 0, channels) / n;
      at::Tensor mean_dy_xmu = global.narrow(0, channels, channels) / n;
      // dx = a dy - k (x - mean) - a mean_dy, with x - mean = (x - m) + m_err.
      at::Tensor a = weight.defined() ? invstd * weight.to(kAcc) : invstd;
      at::Tensor k = a * invstd * invstd * mean_dy_xmu;
      at::Tensor c = -a * mean_dy - k * m_err;
      grad_input = dy * channels_view(a, dtype) - centred * channels_view(k, dtype) +
                   channels_view(c, dtype);
    }
    // One gradient per forward argument (undefined for absent ones and for SyncParams).
    return {grad_input, grad_weight, grad_bias, at::Tensor()};
  }
};

at::Tensor optional_ref(const void* p) {
  return p == nullptr ? at::Tensor() : tchd::tensor_ref(p);
}

void check_channel_vector(const at::Tensor& t, const char* name, int64_t channels) {
  if (!t.defined()) return;
  TORCH_CHECK_VALUE(t.dim() == 1 && t.size(0) == channels, "SyncBatchNorm: ", name,
                    " must have one element per channel (", channels, "), got shape ",
                    t.sizes());
}

}  // namespace

extern "C" int tchd_sync_batch_norm(tchd_group* group, const void* input, const void* weight,
                                    const void* bias, void* running_mean, void* running_var,
                                    int training, double momentum, double eps,
                                    int cudnn_enabled, void** out, char** err) {
  return tchd::guarded(err, [&] {
    TORCH_CHECK_VALUE(input != nullptr && out != nullptr, "SyncBatchNorm: null argument");
    const at::Tensor& x = tchd::tensor_ref(input);
    TORCH_CHECK_VALUE(x.defined(), "SyncBatchNorm: the input is undefined");
    TORCH_CHECK_VALUE(x.dim() == 4, "SyncBatchNorm: expected a 4-D input (N, C, H, W), got shape ",
                      x.sizes());
    const int64_t channels = x.size(1);
    TORCH_CHECK_VALUE(channels > 0, "SyncBatchNorm: the input has no channels");
    TORCH_CHECK_VALUE(at::isFloatingType(x.scalar_type()),
                      "SyncBatchNorm: expected a floating-point input, got ", x.scalar_type());
    at::Tensor w = optional_ref(weight);
    at::Tensor b = optional_ref(bias);
    at::Tensor rm = optional_ref(running_mean);
    at::Tensor rv = optional_ref(running_var);
    check_channel_vector(w, "weight", channels);
    check_channel_vector(b, "bias", channels);
    check_channel_vector(rm, "running_mean", channels);
    check_channel_vector(rv, "running_var", channels);

    at::Tensor y;
    if (training == 0 || group == nullptr || group->pg->getSize() == 1) {
      // Nothing to synchronise: exactly the op tch's BatchNorm runs.
      y = at::batch_norm(x, w, b, rm, rv, training != 0, momentum, eps, cudnn_enabled != 0);
    } else {
      auto present = [](const at::Tensor& t) {
        return t.defined() ? std::optional<at::Tensor>(t) : std::nullopt;
      };
      y = SyncBatchNormFn::apply(x, present(w), present(b),
                                 SyncParams{group->pg, rm, rv, momentum, eps});
    }
    *out = new at::Tensor(std::move(y));
  });
}

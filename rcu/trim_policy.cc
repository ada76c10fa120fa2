#include "rcu/trim_policy.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <stdexcept>
#include <string>
#include <utility>

namespace mvmm::rcu {

namespace {

constexpr std::array<std::pair<std::string_view, TrimPolicyKind>, 4> kPolicyNames{{
    {"off", TrimPolicyKind::off},
    {"batch", TrimPolicyKind::batch},
    {"drain", TrimPolicyKind::drain},
    {"adaptive", TrimPolicyKind::adaptive},
}};

}  // namespace

void TrimConfig::validate() const {
    if (!std::isfinite(factor) || factor <= 0) {
        throw std::invalid_argument("trim factor must be a positive number, got " +
                                    std::to_string(factor));
    }
    if (!(decay >= 0 && decay < 1)) {
        throw std::invalid_argument("trim decay must be in [0, 1), got " + std::to_string(decay));
    }
}

TrimPolicyKind parse_trim_policy(std::string_view name) {
    for (const auto& [known, policy] : kPolicyNames) {
        if (known == name) return policy;
    }
    throw std::invalid_argument("unknown trim policy '" + std::string(name) +
                                "' (expected off, batch, drain or adaptive)");
}

std::string_view to_string(TrimPolicyKind policy) {
    auto entry =
        std::ranges::find(kPolicyNames, policy, &decltype(kPolicyNames)::value_type::second);
    return entry->first;
}

TrimPolicy::TrimPolicy(const TrimConfig& config) : config_(config) {
    config_.validate();
}

bool TrimPolicy::should_trim(TrimEvent event, Clock::time_point now) {
    if (event == TrimEvent::batch_done) freed_since_trim_ = true;
    switch (config_.policy) {
        case TrimPolicyKind::off:
            return false;
        case TrimPolicyKind::batch:
            return event == TrimEvent::batch_done;
        case TrimPolicyKind::drain:
            return event == TrimEvent::queue_drained && freed_since_trim_;
        case TrimPolicyKind::adaptive:
            return freed_since_trim_ && now >= not_before_;
    }
    return false;
}

void TrimPolicy::record_trim(Clock::time_point finished, Clock::duration took) {
    freed_since_trim_ = false;
    cost_ = std::max(took, std::chrono::duration_cast<Clock::duration>(cost_ * config_.decay));
    not_before_ = finished + std::chrono::duration_cast<Clock::duration>(cost_ * config_.factor);
}

std::optional<TrimPolicy::Clock::time_point> TrimPolicy::retry_at() const {
    if (config_.policy != TrimPolicyKind::adaptive || !freed_since_trim_) return std::nullopt;
    return not_before_;
}

}  // namespace mvmm::rcu

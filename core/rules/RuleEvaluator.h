#pragma once

#include "store/CaptureStore.h"

#include <array>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

namespace hookscope {

/// The rules that look for bad training, by their file and command-line names.
enum class RuleKind {
  NonFinite = 0, ExplodingGradient, VanishingGradient, DeadUnits, Saturation, UpdateRatio, LossPlateau,
  RankDivergence,  ///< across the ranks of a job: see RankDivergence.h
  Fp16Overflow,    ///< values float16 cannot hold (docs/export-format.md)
  Fp8Underflow,    ///< values fp8 with per-tensor scaling flushes: E4M3 forward, E5M2 for gradients
  Anomaly          ///< a series out of its own band (store/BandTracker.h); off unless asked for
};
constexpr int kRuleCount = 11;

const char* ruleName(RuleKind rule);
std::optional<RuleKind> parseRuleName(const std::string& name);
/// Every rule's name, "non_finite, exploding_gradient, ..., fp8_underflow", for help and messages.
std::string ruleNameList();

/// Thresholds of the rules; each rule can be switched off.
struct RuleSettings {
  /// anomaly is off until asked for: breaking on it, or setting its threshold, turns it on.
  std::array<bool, kRuleCount> enabled{true, true, true, true, true, true, true, true, true, true, false};
  double explodingNorm = 1e3;      ///< a gradient norm above this explodes...
  double explodingFactor = 10;     ///< ...and so does one above this times its median
  int explodingWindow = 20;        ///< of the last this many steps (needs 5 or more)
  double vanishingNorm = 1e-8;     ///< a nonzero-sized gradient with a norm below this vanishes
  double deadFraction = 0.9;       ///< exact zeros in an activation above this fraction
  double saturationFraction = 0.9; ///< values near the bounds of Sigmoid/Tanh/Hardtanh above this
  double saturationEpsilon = 0.02; ///< "near": within this of the bound
  double updateRatioLow = 1e-6;    ///< update norm / weight norm outside [low, high]
  double updateRatioHigh = 1e-1;
  int plateauWindow = 50;          ///< loss not lower than its best of the window before by
  double plateauMinDecrease = 1e-3;///< this relative amount
  double divergence = 1e-6;        ///< ranks' values that DDP keeps equal differing by more (relative)
  double fp16Overflow = 0;         ///< values above float16's range, as a fraction of a tensor, above this
  double fp8Underflow = 0.01;      ///< values fp8 flushes after amax scaling, as a fraction, above this
  int anomalyBand = 30;            ///< anomaly judges a series once its band holds this many steps
  double anomalySigma = 8;         ///< a statistic this many robust deviations from its band or more (8,
                                   ///< not explain's 6: every series is judged at every step)
};

/// The main threshold of a rule (the one --threshold and the window change).
double ruleThreshold(const RuleSettings& settings, RuleKind rule);
/// Sets it; false (with a message) when the value does not fit the rule.
bool setRuleThreshold(RuleSettings& settings, RuleKind rule, double value, std::string* error);
/// What the main threshold of a rule means, for help texts.
const char* ruleThresholdMeaning(RuleKind rule);

/// One firing of a rule; in RuleEvaluator::alerts(), the firings of one rule on one series,
/// grouped: the first step's value and message, with the last step and the count.
struct Alert {
  std::int64_t step = 0;  ///< the (first) step it fired at
  std::string module;  ///< dotted path, or parameter name for update_ratio, "" for loss_plateau
  CaptureKind kind = CaptureKind::Activation;
  RuleKind rule = RuleKind::NonFinite;
  double value = 0;
  std::string message;
  std::int64_t lastStep = -1;  ///< the last step it fired at (-1: the same as `step`)
  std::int64_t count = 1;      ///< how many steps it fired at
  int rank = 0;                ///< the rank it fired on (the first of them for rank_divergence)
};

/// What happened in one step, in order, as the recorder saw it.
struct StepOrder {
  std::vector<SeriesKey> forward;   ///< activation captures in the order the calls returned
  std::vector<SeriesKey> backward;  ///< gradient captures in the order backward reached them
};

/// Evaluates the rules after every step on what was captured, and keeps every firing.
class RuleEvaluator {
public:
  explicit RuleEvaluator(RuleSettings settings = {});

  /// Looks only at the captures and scalars of this rank of a shared store, and names it in alerts.
  void setRank(int rank) { m_rank = rank; }
  /// Adds alerts found elsewhere (rank_divergence, by the job): grouped like its own.
  void add(const std::vector<Alert>& fired);
  /// Module types by path, for the saturation rule (Sigmoid, Tanh, Hardtanh).
  void setModuleTypes(std::map<std::string, std::string> types) { m_types = std::move(types); }
  /// Evaluates `step`; returns the alerts it fired, which also join alerts().
  std::vector<Alert> evaluate(const CaptureStore& store, std::int64_t step, const StepOrder& order);
  /// Every firing so far, grouped by rule and series (one entry each, so bounded).
  const std::vector<Alert>& alerts() const { return m_alerts; }
  /// Memory the grouped alerts take, which counts against the capture store's cap.
  std::size_t bytes() const { return m_bytes; }
  const RuleSettings& settings() const { return m_settings; }
  void setSettings(const RuleSettings& settings) { m_settings = settings; }

private:
  bool on(RuleKind rule) const { return m_settings.enabled[std::size_t(rule)]; }

  RuleSettings m_settings;
  int m_rank = 0;
  std::map<std::string, std::string> m_types;
  std::vector<Alert> m_alerts;
  std::map<std::tuple<int, std::string, int, int>, std::size_t> m_groups;  ///< (rule, module, kind, rank) -> m_alerts index
  std::size_t m_bytes = 0;
  /// A step's points, kept from step to step: its megabytes are not allocated (and their pages
  /// faulted in) again at each step.
  std::vector<std::pair<SeriesKey, SeriesPoint>> m_points;
};

/// alerts.csv (format version 2): header `step,rank,module,kind,rule,value,message,last_step,count`,
/// one row per rule, rank and series (`step` is the first step it fired at). Version 1 had no rank.
constexpr const char* kAlertsCsvHeader = "step,rank,module,kind,rule,value,message,last_step,count";
std::string alertsCsv(const std::vector<Alert>& alerts);

} // namespace hookscope

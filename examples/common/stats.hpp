// Latency statistics the examples and the benchmarks share: nearest-rank percentiles over
// every sample, and a log-spaced histogram for plots (bench/run draws CDFs from it). Samples
// are kept whole: a run has at most a few hundred thousand, and exact percentiles need them.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <vector>

#include <nlohmann/json.hpp>

namespace vfab::examples {

// The q-quantile (0 < q <= 1) of `sorted` by nearest rank; 0 for no samples.
inline double percentile(const std::vector<double>& sorted, double q) {
    if (sorted.empty()) return 0;
    const auto i = size_t(std::ceil(q * double(sorted.size())));
    return sorted[std::clamp<size_t>(i, 1, sorted.size()) - 1];
}

// min, median, p99, p99.9, max and mean of `samples` (sorted in place), in their unit.
inline nlohmann::json summary(std::vector<double>& samples) {
    std::sort(samples.begin(), samples.end());
    double mean = 0;
    for (double v : samples) mean += v / double(samples.size());
    return {{"min", samples.empty() ? 0 : samples.front()},
            {"median", percentile(samples, 0.5)},
            {"p99", percentile(samples, 0.99)},
            {"p999", percentile(samples, 0.999)},
            {"max", samples.empty() ? 0 : samples.back()},
            {"mean", mean}};
}

// Histogram with `per_decade` log-spaced bins per factor of 10 (20: bins about 12 % wide,
// fine enough for a CDF yet a short JSON line). Only non-empty bins, as [upper edge, count]
// pairs in increasing order; samples <= 0 land in the first bin.
inline nlohmann::json log_histogram(const std::vector<double>& samples, int per_decade = 20) {
    std::map<int, uint64_t> bins;
    for (double v : samples) ++bins[v > 0 ? int(std::ceil(std::log10(v) * per_decade)) : -1000];
    nlohmann::json out = nlohmann::json::array();
    for (auto [k, n] : bins) out.push_back({std::pow(10.0, double(k) / per_decade), n});
    return out;
}

}  // namespace vfab::examples

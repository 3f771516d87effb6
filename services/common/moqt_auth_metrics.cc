// ExportMoqtAuthMetrics: see moqt_auth_metrics.h.
#include "services/common/moqt_auth_metrics.h"

namespace kvcast::services {

void ExportMoqtAuthMetrics(std::shared_ptr<const moqt::HmacTokenAuthority> authority,
                           MetricsRegistry* metrics) {
  using Stats = moqt::HmacTokenAuthority::Stats;
  const std::pair<const char*, uint64_t Stats::*> results[] = {
      {"allowed", &Stats::allowed},
      {"unauthorized", &Stats::unauthorized},
      {"malformed", &Stats::malformed},
      {"expired", &Stats::expired},
  };
  for (const auto& [result, field] : results) {
    metrics->AddCallbackGauge(
        "kvcast_moqt_auth_requests",
        "MoQT requests by authorization verdict (AUTHORIZATION TOKEN checks)",
        [authority, field = field] { return double(authority->stats().*field); },
        {{"result", result}});
  }
}

}  // namespace kvcast::services

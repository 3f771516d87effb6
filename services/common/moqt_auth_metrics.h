// Prometheus series for MoQT authorization (transport/moqt/authorization.h):
// kvcast_moqt_auth_requests{result="allowed|unauthorized|malformed|expired"},
// the verdicts on requests that reached this process's MoQT endpoints.
#ifndef KVCAST_SERVICES_COMMON_MOQT_AUTH_METRICS_H_
#define KVCAST_SERVICES_COMMON_MOQT_AUTH_METRICS_H_

#include <memory>

#include "services/common/metrics.h"
#include "transport/moqt/authorization.h"

namespace kvcast::services {

void ExportMoqtAuthMetrics(std::shared_ptr<const moqt::HmacTokenAuthority> authority,
                           MetricsRegistry* metrics);

}  // namespace kvcast::services

#endif  // KVCAST_SERVICES_COMMON_MOQT_AUTH_METRICS_H_

#include "transport/moqt/track_consumer.h"

namespace kvcast::moqt {

bool FilterAccepts(const Subscribe& sub,
                   const std::optional<Location>& largest_at_subscribe,
                   const Location& loc) {
  switch (sub.filter_type) {
    case FilterType::kNextGroupStart: {
      Location start{largest_at_subscribe ? largest_at_subscribe->group + 1 : 0, 0};
      return start <= loc;
    }
    case FilterType::kLargestObject: {
      Location start = largest_at_subscribe
                           ? Location{largest_at_subscribe->group,
                                      largest_at_subscribe->object + 1}
                           : Location{0, 0};
      return start <= loc;
    }
    case FilterType::kAbsoluteStart:
      return sub.start.value_or(Location{}) <= loc;
    case FilterType::kAbsoluteRange:
      return sub.start.value_or(Location{}) <= loc &&
             loc.group <= sub.end_group.value_or(UINT64_MAX);
  }
  return false;
}

}  // namespace kvcast::moqt

// The xl tracks' operating points: see xl_point.h.
#include "transport/kvcache/xl/xl_point.h"

namespace kvcast::kvcache::xl {

const XlPoint& XlHigh() {
  static const XlPoint p{"xl", 0.39f, 0.16f, /*relative=*/true};
  return p;
}

const XlPoint& XlLow() {
  static const XlPoint p{"xl-lo", 0.98f, 0.32f, /*relative=*/true};
  return p;
}

const XlPoint* XlPointOf(std::string_view track) {
  for (const XlPoint* p : {&XlHigh(), &XlLow()}) {
    if (p->track == track) return p;
  }
  return nullptr;
}

}  // namespace kvcast::kvcache::xl

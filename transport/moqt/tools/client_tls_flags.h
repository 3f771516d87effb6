// The TLS flags of the MoQT client tools (kvcast-moqt, kvcast-kvpub):
// --ca, --insecure, --cert, --key, --server_name. A library of its own: the
// relay defines --cert/--key with a server meaning.
#ifndef KVCAST_TRANSPORT_MOQT_TOOLS_CLIENT_TLS_FLAGS_H_
#define KVCAST_TRANSPORT_MOQT_TOOLS_CLIENT_TLS_FLAGS_H_

#include "transport/quic/endpoint.h"

namespace kvcast::moqt {

// TlsOptions for connecting to a relay, from the flags above.
quic::TlsOptions ClientTlsFromFlags();

}  // namespace kvcast::moqt

#endif  // KVCAST_TRANSPORT_MOQT_TOOLS_CLIENT_TLS_FLAGS_H_

#include "transport/quic/udp_socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/errqueue.h>
#include <linux/filter.h>
#include <netdb.h>
#include <netinet/udp.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103
#endif
#ifndef UDP_GRO
#define UDP_GRO 104
#endif

namespace kvcast::quic {
namespace {

// Without GRO a slot holds one datagram (larger than any QUIC packet we
// accept); with GRO the kernel may hand over up to 64 KiB of same-size
// datagrams in one slot (on loopback a GSO train arrives unsegmented).
constexpr size_t kRxSlot = kMaxUdpDatagram;
constexpr size_t kRxGroSlot = 65536;
constexpr size_t kRxBatch = 64;
constexpr size_t kRxGroBatch = 16;
constexpr size_t kTxBatch = 64;
constexpr int kSocketBuffer = 4 << 20;  // Capped by net.core.[rw]mem_max.

bool WouldBlock(int err) { return err == EAGAIN || err == EWOULDBLOCK; }

}  // namespace

uint16_t SocketAddress::port() const {
  if (family() == AF_INET) {
    return ntohs(reinterpret_cast<const sockaddr_in*>(&storage)->sin_port);
  }
  if (family() == AF_INET6) {
    return ntohs(reinterpret_cast<const sockaddr_in6*>(&storage)->sin6_port);
  }
  return 0;
}

std::string SocketAddress::ToString() const {
  char host[INET6_ADDRSTRLEN] = "?";
  if (family() == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&storage)->sin_addr,
              host, sizeof(host));
    return absl::StrCat(host, ":", port());
  }
  if (family() == AF_INET6) {
    inet_ntop(AF_INET6,
              &reinterpret_cast<const sockaddr_in6*>(&storage)->sin6_addr, host,
              sizeof(host));
    return absl::StrCat("[", host, "]:", port());
  }
  return "unknown";
}

absl::StatusOr<SocketAddress> SocketAddress::Resolve(const std::string& host,
                                                     uint16_t port) {
  std::string name = host.empty() ? "0.0.0.0" : host;
  if (name.size() > 2 && name.front() == '[' && name.back() == ']') {
    name = name.substr(1, name.size() - 2);
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* res = nullptr;
  std::string port_str = std::to_string(port);
  int rv = getaddrinfo(name.c_str(), port_str.c_str(), &hints, &res);
  if (rv != 0 || res == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot resolve ", host, ": ", gai_strerror(rv)));
  }
  SocketAddress addr;
  std::memcpy(&addr.storage, res->ai_addr, res->ai_addrlen);
  addr.len = res->ai_addrlen;
  freeaddrinfo(res);
  return addr;
}

absl::StatusOr<std::unique_ptr<UdpSocket>> UdpSocket::Bind(
    const SocketAddress& local, Options options) {
  int fd = socket(local.family(), SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC,
                  IPPROTO_UDP);
  if (fd < 0) {
    return absl::UnavailableError(
        absl::StrCat("socket: ", std::strerror(errno)));
  }
  int size = kSocketBuffer;
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, sizeof(size));
  setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &size, sizeof(size));
  if (options.shards > 0) {
    const int on = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &on, sizeof(on));
  }
  if (bind(fd, local.sa(), local.len) != 0) {
    int err = errno;
    close(fd);
    return absl::UnavailableError(absl::StrCat(
        "cannot bind UDP ", local.ToString(), ": ", std::strerror(err)));
  }
  if (options.shards > 1) {
    // The group's selector (SteeringShard); the kernel runs it with the UDP
    // payload at offset 0. An out-of-range load ends it returning 0.
    const uint32_t shards = uint32_t(options.shards);
    sock_filter code[] = {
        BPF_STMT(BPF_LD | BPF_B | BPF_ABS, 0),              // A = flags byte
        BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, 0x80, 0, 2),   // long header?
        BPF_STMT(BPF_LD | BPF_B | BPF_ABS, 6),              // A = DCID[0] (long)
        BPF_JUMP(BPF_JMP | BPF_JA, 1, 0, 0),
        BPF_STMT(BPF_LD | BPF_B | BPF_ABS, 1),              // A = DCID[0] (short)
        BPF_STMT(BPF_ALU | BPF_MOD | BPF_K, shards),
        BPF_STMT(BPF_RET | BPF_A, 0),
    };
    sock_fprog program{static_cast<unsigned short>(sizeof(code) / sizeof(code[0])), code};
    if (setsockopt(fd, SOL_SOCKET, SO_ATTACH_REUSEPORT_CBPF, &program, sizeof(program)) != 0) {
      int err = errno;
      close(fd);
      return absl::UnavailableError(absl::StrCat("cannot steer UDP ", local.ToString(),
                                                 " by connection ID: ", std::strerror(err)));
    }
  }
  if (options.report_unreachable) {
    const int on = 1;
    // An IPv6 socket may carry IPv4-mapped peers too: ask for both.
    if (local.family() == AF_INET6) setsockopt(fd, SOL_IPV6, IPV6_RECVERR, &on, sizeof(on));
    setsockopt(fd, SOL_IP, IP_RECVERR, &on, sizeof(on));
  }
  SocketAddress bound;
  bound.len = sizeof(bound.storage);
  getsockname(fd, bound.sa(), &bound.len);
  return std::unique_ptr<UdpSocket>(new UdpSocket(fd, bound, std::move(options)));
}

absl::Status UdpSocket::CheckPortFree(const SocketAddress& local) {
  const int fd = socket(local.family(), SOCK_DGRAM | SOCK_CLOEXEC, IPPROTO_UDP);
  if (fd < 0) return absl::UnavailableError(absl::StrCat("socket: ", std::strerror(errno)));
  const int rc = bind(fd, local.sa(), local.len);
  const int err = errno;
  close(fd);
  if (rc == 0) return absl::OkStatus();
  return absl::UnavailableError(
      absl::StrCat("cannot bind UDP ", local.ToString(), ": ", std::strerror(err)));
}

int UdpSocket::SteeringShard(absl::Span<const uint8_t> datagram, int shards) {
  if (shards <= 1) return 0;
  const size_t at = (!datagram.empty() && (datagram[0] & 0x80)) ? 6 : 1;
  return datagram.size() > at ? datagram[at] % shards : 0;
}

size_t UdpSocket::TakeUnreachable(
    absl::FunctionRef<void(const SocketAddress& peer, int error)> fn) {
  if (!options_.report_unreachable) return 0;
  size_t reported = 0;
  // Bounded: the queue holds what the receive buffer allows.
  for (int i = 0; i < 256; ++i) {
    SocketAddress peer;
    uint8_t head[64];  // the start of the datagram the report is about
    iovec iov{head, sizeof(head)};
    alignas(cmsghdr) char control[256];
    msghdr msg{};
    msg.msg_name = &peer.storage;
    msg.msg_namelen = sizeof(peer.storage);
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    if (recvmsg(fd_, &msg, MSG_ERRQUEUE | MSG_DONTWAIT) < 0) break;
    peer.len = msg.msg_namelen;
    for (cmsghdr* cm = CMSG_FIRSTHDR(&msg); cm != nullptr; cm = CMSG_NXTHDR(&msg, cm)) {
      const bool v4 = cm->cmsg_level == SOL_IP && cm->cmsg_type == IP_RECVERR;
      const bool v6 = cm->cmsg_level == SOL_IPV6 && cm->cmsg_type == IPV6_RECVERR;
      if (!v4 && !v6) continue;
      sock_extended_err ee;
      std::memcpy(&ee, CMSG_DATA(cm), sizeof(ee));
      if (ee.ee_origin != SO_EE_ORIGIN_ICMP && ee.ee_origin != SO_EE_ORIGIN_ICMP6) continue;
      const int e = int(ee.ee_errno);
      if (e == ECONNREFUSED || e == EHOSTUNREACH || e == ENETUNREACH) {
        fn(peer, e);
        ++reported;
      }
    }
  }
  return reported;
}

absl::Status UdpSocket::Connect(const SocketAddress& remote) {
  if (connect(fd_, reinterpret_cast<const sockaddr*>(&remote.storage), remote.len) != 0) {
    const int err = errno;
    return absl::Status(absl::ErrnoToStatusCode(err),
                        absl::StrCat("connect (UDP): ", std::strerror(err)));
  }
  return absl::OkStatus();
}

UdpSocket::UdpSocket(int fd, const SocketAddress& local, Options options)
    : fd_(fd),
      local_(local),
      options_(std::move(options)) {
  // Probe UDP GSO support: the option exists since Linux 4.18.
  int probe = 1200;
  gso_ok_ = setsockopt(fd_, SOL_UDP, UDP_SEGMENT, &probe, sizeof(probe)) == 0;
  probe = 0;
  if (gso_ok_) setsockopt(fd_, SOL_UDP, UDP_SEGMENT, &probe, sizeof(probe));
  int on = 1;
  gro_ = setsockopt(fd_, SOL_UDP, UDP_GRO, &on, sizeof(on)) == 0;
  rx_slot_ = gro_ ? kRxGroSlot : kRxSlot;
  rx_batch_ = gro_ ? kRxGroBatch : kRxBatch;
  rx_buffers_.resize(rx_slot_ * rx_batch_);
}

UdpSocket::~UdpSocket() { close(fd_); }

size_t UdpSocket::Receive(
    absl::FunctionRef<void(const SocketAddress&, absl::Span<uint8_t>)> fn,
    int max_batches) {
  mmsghdr msgs[kRxBatch];
  iovec iovs[kRxBatch];
  SocketAddress from[kRxBatch];
  alignas(cmsghdr) char control[kRxBatch][CMSG_SPACE(sizeof(int))];
  size_t total = 0;
  for (int batch = 0; batch < max_batches; ++batch) {
    for (size_t i = 0; i < rx_batch_; ++i) {
      iovs[i].iov_base = rx_buffers_.data() + i * rx_slot_;
      iovs[i].iov_len = rx_slot_;
      std::memset(&msgs[i], 0, sizeof(msgs[i]));
      msgs[i].msg_hdr.msg_name = &from[i].storage;
      msgs[i].msg_hdr.msg_namelen = sizeof(from[i].storage);
      msgs[i].msg_hdr.msg_iov = &iovs[i];
      msgs[i].msg_hdr.msg_iovlen = 1;
      if (gro_) {
        msgs[i].msg_hdr.msg_control = control[i];
        msgs[i].msg_hdr.msg_controllen = sizeof(control[i]);
      }
    }
    int n = recvmmsg(fd_, msgs, rx_batch_, MSG_DONTWAIT, nullptr);
    if (n < 0 && !WouldBlock(errno) && errno != EINTR) {
      // A pending ICMP error is reported once, ahead of the datagrams
      // queued behind it: note it and read them.
      error_ = errno;
      continue;
    }
    if (n <= 0) break;
    for (int i = 0; i < n; ++i) {
      const msghdr& hdr = msgs[i].msg_hdr;
      if (hdr.msg_flags & MSG_TRUNC) continue;
      from[i].len = hdr.msg_namelen;
      size_t len = msgs[i].msg_len;
      size_t segment = len;
      for (cmsghdr* cm = CMSG_FIRSTHDR(const_cast<msghdr*>(&hdr)); cm != nullptr;
           cm = CMSG_NXTHDR(const_cast<msghdr*>(&hdr), cm)) {
        if (cm->cmsg_level == SOL_UDP && cm->cmsg_type == UDP_GRO) {
          int gso_size = 0;
          std::memcpy(&gso_size, CMSG_DATA(cm), sizeof(gso_size));
          if (gso_size > 0) segment = static_cast<size_t>(gso_size);
        }
      }
      uint8_t* base = static_cast<uint8_t*>(iovs[i].iov_base);
      for (size_t off = 0; off < len; off += segment) {
        fn(from[i], absl::Span<uint8_t>(base + off, std::min(segment, len - off)));
        ++total;
      }
    }
    if (static_cast<size_t>(n) < rx_batch_) break;
  }
  return total;
}

size_t UdpSocket::MaxGsoSegments(size_t segment_size) {
  // The whole train is one UDP datagram before segmentation: at most
  // 65,507 bytes (65,535 less the IPv4 and UDP headers).
  return std::max<size_t>(1, std::min<size_t>(64, 65507 / segment_size));
}

size_t UdpSocket::Send(const SocketAddress& to, absl::Span<const uint8_t> data,
                       size_t segment_size) {
  if (data.empty()) return 0;
  if (segment_size == 0 || segment_size > data.size()) {
    segment_size = data.size();
  }
  if (options_.filter || !options_.batch_send || data.size() == segment_size) {
    return SendOneByOne(to, data, segment_size);
  }
  if (gso_ok_) return SendGso(to, data, segment_size);
  return SendMmsg(to, data, segment_size);
}

size_t UdpSocket::SendGso(const SocketAddress& to,
                          absl::Span<const uint8_t> data, size_t segment_size) {
  const size_t max_train = MaxGsoSegments(segment_size) * segment_size;
  size_t sent = 0;
  while (sent < data.size()) {
    size_t len = std::min(max_train, data.size() - sent);
    iovec iov{const_cast<uint8_t*>(data.data() + sent), len};
    msghdr msg{};
    msg.msg_name = const_cast<sockaddr*>(to.sa());
    msg.msg_namelen = to.len;
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(uint16_t))] = {};
    if (len > segment_size) {
      msg.msg_control = control;
      msg.msg_controllen = sizeof(control);
      cmsghdr* cm = CMSG_FIRSTHDR(&msg);
      cm->cmsg_level = SOL_UDP;
      cm->cmsg_type = UDP_SEGMENT;
      cm->cmsg_len = CMSG_LEN(sizeof(uint16_t));
      uint16_t seg = static_cast<uint16_t>(segment_size);
      std::memcpy(CMSG_DATA(cm), &seg, sizeof(seg));
    }
    ssize_t rc;
    do {
      rc = sendmsg(fd_, &msg, 0);
    } while (rc < 0 && errno == EINTR);
    if (rc < 0) {
      if (WouldBlock(errno)) return sent;
      if (errno == EIO || errno == EINVAL || errno == EOPNOTSUPP) {
        // The device cannot segment: stop using GSO on this socket.
        gso_ok_ = false;
        return sent + SendMmsg(to, data.subspan(sent), segment_size);
      }
      // Other errors (e.g. ECONNREFUSED from an earlier ICMP): drop.
    }
    sent += len;
  }
  return sent;
}

size_t UdpSocket::SendMmsg(const SocketAddress& to,
                           absl::Span<const uint8_t> data,
                           size_t segment_size) {
  size_t sent = 0;
  while (sent < data.size()) {
    mmsghdr msgs[kTxBatch];
    iovec iovs[kTxBatch];
    size_t count = 0;
    for (size_t off = sent; off < data.size() && count < kTxBatch;
         off += segment_size, ++count) {
      iovs[count].iov_base = const_cast<uint8_t*>(data.data() + off);
      iovs[count].iov_len = std::min(segment_size, data.size() - off);
      std::memset(&msgs[count], 0, sizeof(msgs[count]));
      msgs[count].msg_hdr.msg_name = const_cast<sockaddr*>(to.sa());
      msgs[count].msg_hdr.msg_namelen = to.len;
      msgs[count].msg_hdr.msg_iov = &iovs[count];
      msgs[count].msg_hdr.msg_iovlen = 1;
    }
    int n;
    do {
      n = sendmmsg(fd_, msgs, count, 0);
    } while (n < 0 && errno == EINTR);
    if (n < 0) {
      if (WouldBlock(errno)) return sent;
      n = 1;  // Drop the datagram that failed and go on.
    }
    for (int i = 0; i < n; ++i) sent += iovs[i].iov_len;
  }
  return sent;
}

size_t UdpSocket::SendOneByOne(const SocketAddress& to,
                               absl::Span<const uint8_t> data,
                               size_t segment_size) {
  size_t sent = 0;
  while (sent < data.size()) {
    size_t len = std::min(segment_size, data.size() - sent);
    if (options_.filter && !options_.filter(data.subspan(sent, len))) {
      sent += len;  // Dropped by the test hook: counts as sent.
      continue;
    }
    ssize_t rc;
    do {
      rc = sendto(fd_, data.data() + sent, len, 0, to.sa(), to.len);
    } while (rc < 0 && errno == EINTR);
    if (rc < 0 && WouldBlock(errno)) return sent;
    sent += len;
  }
  return sent;
}

}  // namespace kvcast::quic

{{/*
Command lines of the four binaries: exactly the absl flags each one defines
(docs/deploy.md, "Command lines"). Called with (dict "root" $ "role" ROLE);
each emits YAML list items.
*/}}

{{- define "kvcast.command" -}}
{{- $bin := dict "scheduler" "kvcast-scheduler" "prefill" "kvcast-prefill" "decode" "kvcast-decode" "relay" "kvcast-relay" }}
- /usr/local/bin/{{ index $bin .role }}
{{- end }}

{{/* Flags every service has: gRPC (health included), metrics, gRPC TLS. */}}
{{- define "kvcast.args.common" -}}
{{- $v := index .root.Values .role }}
- --grpc_listen={{ include "kvcast.listen" (dict "root" .root "port" $v.ports.grpc) }}
- --metrics_listen={{ include "kvcast.listen" (dict "root" .root "port" $v.ports.metrics) }}
{{- if .root.Values.tls.grpc.enabled }}
- --grpc_cert=/etc/kvcast/grpc/tls.crt
- --grpc_key=/etc/kvcast/grpc/tls.key
- --grpc_ca=/etc/kvcast/grpc/ca.crt
{{- end }}
{{- end }}

{{- define "kvcast.args.scheduler" -}}
{{- $v := .root.Values.scheduler }}
{{ include "kvcast.args.common" . }}
- --lease_s={{ int $v.leaseSeconds }}
- --max_queue={{ int $v.maxQueue }}
{{- end }}

{{/* prefill and decode take the same flags. */}}
{{- define "kvcast.args.worker" -}}
{{- $v := index .root.Values .role }}
{{ include "kvcast.args.common" . }}
- --model={{ .root.Values.model.mountPath }}
- --backend={{ $v.backend }}
- --kv_cache_mb={{ int $v.kvCacheMB }}
- --scheduler={{ include "kvcast.schedulerAddress" .root }}
- --advertise_host=$(KVCAST_ADVERTISE_HOST)
- --moqt_listen={{ include "kvcast.listen" (dict "root" .root "port" $v.ports.moqt) }}
{{- if .root.Values.relay.enabled }}
- --relay={{ include "kvcast.relayAddress" .root }}
{{- end }}
- --quic_cert=/etc/kvcast/quic/tls.crt
- --quic_key=/etc/kvcast/quic/tls.key
- --quic_ca=/etc/kvcast/quic/ca.crt
{{- end }}

{{/* transport/moqt/relay_main.cc flags, plus --grpc_listen/--metrics_listen. */}}
{{- define "kvcast.args.relay" -}}
{{- $v := .root.Values.relay }}
{{ include "kvcast.args.common" . }}
- --listen={{ include "kvcast.listen" (dict "root" .root "port" $v.ports.moqt) }}
- --cert=/etc/kvcast/quic/tls.crt
- --key=/etc/kvcast/quic/tls.key
- --client_ca=/etc/kvcast/quic/ca.crt
- --require_client_cert={{ .root.Values.tls.quic.requireClientCert }}
- --cache_mb={{ int $v.cacheMB }}
- --subscribe_wait_ms={{ int $v.subscribeWaitMs }}
- --idle_timeout_s={{ int $v.idleTimeoutSeconds }}
{{- end }}

{{- define "kvcast.args" -}}
{{- if include "kvcast.isWorker" . }}
{{- include "kvcast.args.worker" . }}
{{- else }}
{{- include (printf "kvcast.args.%s" .role) . }}
{{- end }}
{{- range (index .root.Values .role).extraArgs }}
- {{ . | quote }}
{{- end }}
{{- end }}

{{/*
Command lines of the four binaries: exactly the absl flags each one defines
(docs/deploy.md, "Command lines"). Called with (dict "root" $ "role" ROLE);
each emits YAML list items.
*/}}

{{- define "kvcast.command" -}}
{{- $bin := dict "scheduler" "kvcast-scheduler" "prefill" "kvcast-prefill" "decode" "kvcast-decode" "relay" "kvcast-relay" }}
- /usr/local/bin/{{ index $bin .role }}
{{- end }}

{{/*
Flags every binary has: gRPC (health included) and metrics; and gRPC TLS
where kvcast.grpcTls says (the scheduler's from tls.grpc, the workers' from
tls.internal; kvcast-relay's gRPC port serves only grpc.health.v1, in
plaintext: it has no TLS flags for it).
*/}}
{{- define "kvcast.args.common" -}}
{{- $v := index .root.Values .role }}
- --grpc_listen={{ include "kvcast.listen" (dict "root" .root "port" $v.ports.grpc) }}
- --metrics_listen={{ include "kvcast.listen" (dict "root" .root "port" $v.ports.metrics) }}
{{- if include "kvcast.grpcTls" . }}
{{- $dir := ternary "/etc/kvcast/grpc" "/etc/kvcast/internal" (eq .role "scheduler") }}
- --grpc_cert={{ $dir }}/tls.crt
- --grpc_key={{ $dir }}/tls.key
- --grpc_ca={{ $dir }}/ca.crt
{{- end }}
{{- end }}

{{/*
--drain_s of the scheduler and the workers: in-flight calls get the pod's
terminationGracePeriodSeconds less 5 s (at least 1 s), so that they are
cancelled, and the process exits, before the kubelet's SIGKILL.
*/}}
{{- define "kvcast.args.drain" -}}
{{- $grace := int (index .root.Values .role).terminationGracePeriodSeconds -}}
- --drain_s={{ max 1 (sub $grace 5) }}
{{- end }}

{{/* The scheduler reads only the tokenizer from the model directory. */}}
{{- define "kvcast.args.scheduler" -}}
{{- $v := .root.Values.scheduler }}
{{ include "kvcast.args.common" . }}
- --model={{ .root.Values.model.mountPath }}{{ with .root.Values.model.file }}/{{ . }}{{ end }}
{{- if $v.ports.http }}
- --http_listen={{ include "kvcast.listen" (dict "root" .root "port" $v.ports.http) }}
{{- if .root.Values.tls.http.enabled }}
- --http_cert=/etc/kvcast/http/tls.crt
- --http_key=/etc/kvcast/http/tls.key
{{- end }}
{{- end }}
{{- if $v.apiKeysSecret }}
- --api_keys_file=/etc/kvcast/api-keys/api_keys
{{- end }}
{{- if .root.Values.tls.internal.enabled }}
- --internal_grpc_listen={{ include "kvcast.listen" (dict "root" .root "port" $v.ports.internal) }}
- --internal_grpc_cert=/etc/kvcast/internal/tls.crt
- --internal_grpc_key=/etc/kvcast/internal/tls.key
- --internal_grpc_ca=/etc/kvcast/internal/ca.crt
- --worker_tls_name={{ .root.Values.tls.internal.workerName }}
{{- end }}
- --moqt_auth_key_file={{ include "kvcast.moqtAuthKeyFile" . }}
- --lease_s={{ int $v.leaseSeconds }}
- --max_queue={{ int $v.maxQueue }}
- --planner_interval_s={{ $v.planner.intervalSeconds }}
- --slo_ttft_ms={{ $v.planner.sloTtftMs }}
- --slo_itl_ms={{ $v.planner.sloItlMs }}
{{ include "kvcast.args.drain" . }}
{{- end }}

{{/* prefill and decode take the same flags. */}}
{{- define "kvcast.args.worker" -}}
{{- $v := index .root.Values .role }}
{{ include "kvcast.args.common" . }}
- --model={{ .root.Values.model.mountPath }}{{ with .root.Values.model.file }}/{{ . }}{{ end }}
{{- with .root.Values.model.name }}
- --model_name={{ . }}
{{- end }}
- --backend={{ $v.backend }}
- --kv_cache_mb={{ int $v.kvCacheMB }}
- --kv_host_tier_mb={{ int ($v.kvHostTierMB | default 0) }}
{{- if include "kvcast.diskTier" . }}
- --kv_disk_tier_dir=/var/lib/kvcast/kv-tier
- --kv_disk_tier_mb={{ int $v.kvDiskTier.mb }}
{{- end }}
- --scheduler={{ include "kvcast.schedulerAddress" .root }}
- --advertise_host=$(KVCAST_ADVERTISE_HOST)
- --moqt_listen={{ include "kvcast.listen" (dict "root" .root "port" $v.ports.moqt) }}
{{- if .root.Values.relay.enabled }}
- --relay={{ include "kvcast.relayAddress" .root }}
{{- end }}
- --quic_cert=/etc/kvcast/quic/tls.crt
- --quic_key=/etc/kvcast/quic/tls.key
- --quic_ca=/etc/kvcast/quic/ca.crt
- --moqt_auth_key_file={{ include "kvcast.moqtAuthKeyFile" . }}
{{ include "kvcast.args.drain" . }}
{{- end }}

{{/* services/relay/relay_main.cc flags (its --stats_interval_s stays off). */}}
{{- define "kvcast.args.relay" -}}
{{- $v := .root.Values.relay }}
{{ include "kvcast.args.common" . }}
- --listen={{ include "kvcast.listen" (dict "root" .root "port" $v.ports.moqt) }}
- --cert=/etc/kvcast/quic/tls.crt
- --key=/etc/kvcast/quic/tls.key
- --client_ca=/etc/kvcast/quic/ca.crt
- --require_client_cert={{ .root.Values.tls.quic.requireClientCert }}
- --auth_key_file={{ include "kvcast.moqtAuthKeyFile" . }}
- --cache_mb={{ int $v.cacheMB }}
- --send_window_kb={{ int $v.sendWindowKB }}
- --loop_threads={{ int $v.loopThreads }}
{{- if include "kvcast.diskTier" . }}
- --spill_dir=/var/lib/kvcast/kv-tier
- --spill_mb={{ int $v.kvDiskTier.mb }}
{{- end }}
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

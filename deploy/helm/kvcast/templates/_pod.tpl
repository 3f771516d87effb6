{{/*
Pieces of a role's pod spec: probes, environment, volumes and mounts.
Called with (dict "root" $ "role" ROLE).
*/}}

{{/*
gRPC health probes (grpc.health.v1) on the role's gRPC port. Where the port
speaks TLS (kvcast.grpcTls) they become TCP checks of the same port: the
kubelet's gRPC probe speaks plaintext only.
*/}}
{{- define "kvcast.probes" -}}
{{- $v := index .root.Values .role }}
{{- $check := dict "grpc" (dict "port" (int $v.ports.grpc)) }}
{{- if include "kvcast.grpcTls" . }}
{{- $check = dict "tcpSocket" (dict "port" "grpc") }}
{{- end }}
startupProbe:
  {{- toYaml $check | nindent 2 }}
  periodSeconds: {{ $v.probes.startup.periodSeconds }}
  failureThreshold: {{ $v.probes.startup.failureThreshold }}
livenessProbe:
  {{- toYaml $check | nindent 2 }}
  periodSeconds: {{ $v.probes.liveness.periodSeconds }}
  timeoutSeconds: {{ $v.probes.liveness.timeoutSeconds }}
  failureThreshold: {{ $v.probes.liveness.failureThreshold }}
readinessProbe:
  {{- toYaml $check | nindent 2 }}
  periodSeconds: {{ $v.probes.readiness.periodSeconds }}
  timeoutSeconds: {{ $v.probes.readiness.timeoutSeconds }}
  failureThreshold: {{ $v.probes.readiness.failureThreshold }}
{{- end }}

{{- define "kvcast.containerPorts" -}}
{{- $v := index .root.Values .role }}
- name: grpc
  containerPort: {{ int $v.ports.grpc }}
  protocol: TCP
{{- if include "kvcast.usesQuic" . }}
- name: moqt
  containerPort: {{ int $v.ports.moqt }}
  protocol: UDP
{{- end }}
- name: metrics
  containerPort: {{ int $v.ports.metrics }}
  protocol: TCP
{{- if $v.ports.http }}
- name: http
  containerPort: {{ int $v.ports.http }}
  protocol: TCP
{{- end }}
{{- if and (eq .role "scheduler") .root.Values.tls.internal.enabled }}
- name: internal
  containerPort: {{ int $v.ports.internal }}
  protocol: TCP
{{- end }}
{{- end }}

{{/* Workers advertise the pod IP, or the node IP under hostNetwork. */}}
{{- define "kvcast.env" -}}
{{- $v := index .root.Values .role }}
{{- if include "kvcast.isWorker" . }}
- name: KVCAST_ADVERTISE_HOST
  valueFrom:
    fieldRef:
      fieldPath: {{ ternary "status.hostIP" "status.podIP" .root.Values.hostNetwork }}
{{- if eq $v.backend "cpu" }}
# CPU backend: hide the node's GPUs from the NVIDIA container runtime.
- name: NVIDIA_VISIBLE_DEVICES
  value: void
{{- end }}
{{- end }}
{{- with $v.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* The role's resources, plus nvidia.com/gpu for workers on CUDA. */}}
{{- define "kvcast.resources" -}}
{{- $v := index .root.Values .role }}
{{- $res := deepCopy (default dict $v.resources) }}
{{- if and (include "kvcast.isWorker" .) (eq $v.backend "cuda") }}
{{- $_ := set $res "requests" (set (default dict $res.requests) "nvidia.com/gpu" (int $v.gpus)) }}
{{- $_ := set $res "limits" (set (default dict $res.limits) "nvidia.com/gpu" (int $v.gpus)) }}
{{- end }}
{{- toYaml $res }}
{{- end }}

{{/* "true" when a role has a disk KV tier (kvDiskTier.mb > 0): the
workers' below their host tier, the relay's below its cache. */}}
{{- define "kvcast.diskTier" -}}
{{- $d := (index .root.Values .role).kvDiskTier }}
{{- if and $d (gt (int $d.mb) 0) }}true{{ end }}
{{- end }}

{{- define "kvcast.volumeMounts" -}}
- name: tmp
  mountPath: /tmp
{{- if include "kvcast.diskTier" . }}
- name: kv-tier
  mountPath: /var/lib/kvcast/kv-tier
{{- end }}
{{- if include "kvcast.mountsModel" . }}
- name: model
  mountPath: {{ .root.Values.model.mountPath }}
  readOnly: true
  {{- if and (eq .root.Values.model.source "pvc") .root.Values.model.pvc.subPath }}
  subPath: {{ .root.Values.model.pvc.subPath }}
  {{- end }}
{{- end }}
{{- if include "kvcast.usesQuic" . }}
- name: quic-tls
  mountPath: /etc/kvcast/quic
  readOnly: true
{{- end }}
- name: moqt-auth
  mountPath: /etc/kvcast/moqt-auth
  readOnly: true
{{- if and (include "kvcast.grpcTls" .) (eq .role "scheduler") }}
- name: grpc-tls
  mountPath: /etc/kvcast/grpc
  readOnly: true
{{- end }}
{{- if include "kvcast.internalTls" . }}
- name: internal-tls
  mountPath: /etc/kvcast/internal
  readOnly: true
{{- end }}
{{- if include "kvcast.httpTls" . }}
- name: http-tls
  mountPath: /etc/kvcast/http
  readOnly: true
{{- end }}
{{- if (index .root.Values .role).apiKeysSecret }}
- name: api-keys
  mountPath: /etc/kvcast/api-keys
  readOnly: true
{{- end }}
{{- end }}

{{- define "kvcast.volumes" -}}
{{- $m := .root.Values.model }}
- name: tmp
  emptyDir: {}
{{- if include "kvcast.diskTier" . }}
{{- $d := (index .root.Values .role).kvDiskTier }}
- name: kv-tier
  {{- if eq $d.volume "hostPath" }}
  hostPath:
    path: {{ $d.hostPath }}
    type: DirectoryOrCreate
  {{- else }}
  emptyDir:
    sizeLimit: {{ printf "%dMi" (add (int $d.mb) 64) }}
  {{- end }}
{{- end }}
{{- if include "kvcast.mountsModel" . }}
- name: model
  {{- if eq $m.source "pvc" }}
  persistentVolumeClaim:
    claimName: {{ $m.pvc.claimName }}
    readOnly: true
  {{- else if eq $m.source "hostPath" }}
  hostPath:
    path: {{ $m.hostPath.path }}
    type: Directory
  {{- else }}
  emptyDir:
    {{- /* The scheduler gets only the tokenizer files (kvcast.initContainers). */}}
    sizeLimit: {{ ternary $m.image.sizeLimit "1Gi" (eq (include "kvcast.isWorker" .) "true") }}
  {{- end }}
{{- end }}
{{- if include "kvcast.usesQuic" . }}
- name: quic-tls
  secret:
    secretName: {{ include "kvcast.quicSecretName" .root }}
    defaultMode: 0440
{{- end }}
- name: moqt-auth
  secret:
    secretName: {{ include "kvcast.moqtAuthSecretName" .root }}
    defaultMode: 0440
{{- if and (include "kvcast.grpcTls" .) (eq .role "scheduler") }}
- name: grpc-tls
  secret:
    secretName: {{ .root.Values.tls.grpc.secretName }}
    defaultMode: 0440
{{- end }}
{{- if include "kvcast.internalTls" . }}
- name: internal-tls
  secret:
    secretName: {{ include "kvcast.internalSecretName" .root }}
    defaultMode: 0440
{{- end }}
{{- if include "kvcast.httpTls" . }}
- name: http-tls
  secret:
    secretName: {{ .root.Values.tls.http.secretName }}
    defaultMode: 0440
{{- end }}
{{- with (index .root.Values .role).apiKeysSecret }}
- name: api-keys
  secret:
    secretName: {{ . }}
    defaultMode: 0440
{{- end }}
{{- end }}

{{/*
model.source=image: copy the checkpoint out of the model image; for the
scheduler only its tokenizer files (tokenizer.json, tokenizer_config.json,
tokenizer.model: the ones kvcast-scheduler --model reads), which takes a
shell for the glob. The path is passed as $0, never parsed by the shell.
*/}}
{{- define "kvcast.initContainers" -}}
{{- $m := .root.Values.model }}
{{- if and (include "kvcast.mountsModel" .) (eq $m.source "image") }}
{{- $path := trimSuffix "/" $m.image.path }}
- name: copy-model
  image: {{ printf "%s:%s" $m.image.repository $m.image.tag }}
  imagePullPolicy: {{ $m.image.pullPolicy }}
  {{- if include "kvcast.isWorker" . }}
  command: ["cp", "-R", "{{ $path }}/.", "/kvcast-model/"]
  {{- else }}
  command: ["sh", "-c", "cp \"$0\"/tokenizer* /kvcast-model/", {{ $path | quote }}]
  {{- end }}
  securityContext:
    {{- toYaml .root.Values.containerSecurityContext | nindent 4 }}
  volumeMounts:
    - name: model
      mountPath: /kvcast-model
{{- end }}
{{- end }}

{{/* Placement: the role's affinity, plus one pod per node under hostNetwork. */}}
{{- define "kvcast.affinity" -}}
{{- $v := index .root.Values .role }}
{{- $aff := deepCopy (default dict $v.affinity) }}
{{- if .root.Values.hostNetwork }}
{{- $term := dict "topologyKey" "kubernetes.io/hostname" "labelSelector" (dict "matchLabels" (include "kvcast.selectorLabels" . | fromYaml)) }}
{{- $paa := default dict $aff.podAntiAffinity }}
{{- $req := default list (get $paa "requiredDuringSchedulingIgnoredDuringExecution") }}
{{- $_ := set $paa "requiredDuringSchedulingIgnoredDuringExecution" (append $req $term) }}
{{- $_ := set $aff "podAntiAffinity" $paa }}
{{- end }}
{{- if $aff }}{{ toYaml $aff }}{{ end }}
{{- end }}

{{/*
Names, labels and addresses shared by every template. Templates that take a
role are called with (dict "root" $ "role" ROLE), ROLE one of
scheduler | prefill | decode | relay.
*/}}

{{- define "kvcast.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "kvcast.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* Every role the chart knows, in order. */}}
{{- define "kvcast.allRoles" -}}
scheduler prefill decode relay
{{- end }}

{{/* The roles this release runs, in order; the relay is optional. */}}
{{- define "kvcast.roles" -}}
{{- $roles := splitList " " (include "kvcast.allRoles" .) }}
{{- if not .Values.relay.enabled }}{{ $roles = without $roles "relay" }}{{ end }}
{{- join " " $roles }}
{{- end }}

{{/* Name of a role's Deployment, Service, HPA, PDB: <fullname>-<role>. */}}
{{- define "kvcast.componentName" -}}
{{- printf "%s-%s" (include "kvcast.fullname" .root | trunc 50 | trimSuffix "-") .role }}
{{- end }}

{{/* Labels that select every object of this release (called with the root context). */}}
{{- define "kvcast.instanceLabels" -}}
app.kubernetes.io/name: {{ include "kvcast.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/*
Labels of every object of this release (called with the root context); the
role-less ones (ServiceAccount, ServiceMonitor, the dev QUIC Secret) carry
just these, a role's objects these plus their component (kvcast.labels).
*/}}
{{- define "kvcast.commonLabels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "kvcast.instanceLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: kvcast
{{- end }}

{{- define "kvcast.selectorLabels" -}}
{{ include "kvcast.instanceLabels" .root }}
app.kubernetes.io/component: {{ .role }}
{{- end }}

{{- define "kvcast.labels" -}}
{{ include "kvcast.commonLabels" .root }}
app.kubernetes.io/component: {{ .role }}
{{- end }}

{{- define "kvcast.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "kvcast.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "kvcast.image" -}}
{{- $v := index .root.Values .role }}
{{- printf "%s:%s" $v.image.repository (default .root.Chart.AppVersion .root.Values.image.tag) }}
{{- end }}

{{/* In-cluster DNS name of a role's Service. */}}
{{- define "kvcast.serviceHost" -}}
{{- printf "%s.%s.svc" (include "kvcast.componentName" .) .root.Release.Namespace }}
{{- end }}

{{/* The scheduler's headless peers Service: one address per replica. */}}
{{- define "kvcast.schedulerPeersName" -}}
{{- printf "%s-peers" (include "kvcast.componentName" (dict "root" . "role" "scheduler")) }}
{{- end }}

{{/* HOST:PORT workers register and heartbeat with (--scheduler): the peers
Service, which resolves to every replica; the internal port with
tls.internal, else the public one. */}}
{{- define "kvcast.schedulerAddress" -}}
{{- $p := .Values.scheduler.ports }}
{{- printf "%s.%s.svc:%d" (include "kvcast.schedulerPeersName" .) .Release.Namespace (int (ternary $p.internal $p.grpc .Values.tls.internal.enabled)) }}
{{- end }}

{{/* HOST:PORT of the MoQT relay Service (--relay). */}}
{{- define "kvcast.relayAddress" -}}
{{- printf "%s:%d" (include "kvcast.serviceHost" (dict "root" . "role" "relay")) (int .Values.relay.ports.moqt) }}
{{- end }}

{{/* LISTEN_HOST:PORT for a --*_listen flag. */}}
{{- define "kvcast.listen" -}}
{{- printf "%s:%d" .root.Values.listenHost (int .port) }}
{{- end }}

{{- define "kvcast.quicSecretName" -}}
{{- default (printf "%s-quic-dev" (include "kvcast.fullname" .)) .Values.tls.quic.secretName }}
{{- end }}

{{- define "kvcast.moqtAuthSecretName" -}}
{{- default (printf "%s-moqt-auth" (include "kvcast.fullname" .)) .Values.tls.moqtAuth.secretName }}
{{- end }}

{{/* Where every role reads the MoQT authorization keys. */}}
{{- define "kvcast.moqtAuthKeyFile" -}}
/etc/kvcast/moqt-auth/moqt-auth.key
{{- end }}

{{/* Whether a role speaks QUIC (and so mounts the QUIC TLS material); reads only .role. */}}
{{- define "kvcast.usesQuic" -}}
{{- if has .role (list "prefill" "decode" "relay") }}true{{ end }}
{{- end }}

{{/* Whether a role is a GPU-capable worker (prefill, decode); reads only .role. */}}
{{- define "kvcast.isWorker" -}}
{{- if has .role (list "prefill" "decode") }}true{{ end }}
{{- end }}

{{/*
Whether a role mounts the model: the workers load it, the scheduler reads
its tokenizer (--model); reads only .role.
*/}}
{{- define "kvcast.mountsModel" -}}
{{- if has .role (list "scheduler" "prefill" "decode") }}true{{ end }}
{{- end }}

{{/*
Whether a role's --grpc_listen port speaks TLS: the scheduler's with
tls.grpc.enabled, the workers' with tls.internal.enabled. kvcast-relay's
gRPC port (grpc.health.v1 only) is plaintext.
*/}}
{{- define "kvcast.grpcTls" -}}
{{- if eq .role "scheduler" }}{{ if .root.Values.tls.grpc.enabled }}true{{ end }}
{{- else if has .role (list "prefill" "decode") }}{{ if .root.Values.tls.internal.enabled }}true{{ end }}
{{- end }}
{{- end }}

{{/* Whether a role mounts the scheduler-worker TLS material (/etc/kvcast/internal). */}}
{{- define "kvcast.internalTls" -}}
{{- if and .root.Values.tls.internal.enabled (ne .role "relay") }}true{{ end }}
{{- end }}

{{/* Whether a role serves HTTPS (the scheduler's OpenAI-compatible API, tls.http). */}}
{{- define "kvcast.httpTls" -}}
{{- if and (eq .role "scheduler") .root.Values.tls.http.enabled .root.Values.scheduler.ports.http }}true{{ end }}
{{- end }}

{{- define "kvcast.internalSecretName" -}}
{{- default (include "kvcast.quicSecretName" .) .Values.tls.internal.secretName }}
{{- end }}

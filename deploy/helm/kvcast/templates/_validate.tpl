{{/*
Checks values.schema.json cannot express; each failure stops the render
with a message that names the values involved.
*/}}
{{- define "kvcast.validate" -}}
{{- if and .Values.tls.grpc.enabled (not .Values.tls.internal.enabled) }}
{{- fail "kvcast: tls.grpc.enabled needs tls.internal.enabled: the workers register on the scheduler's internal port (with tls.grpc the public one requires client certificates)" }}
{{- end }}
{{- $seen := dict }}
{{- range $role := splitList " " (include "kvcast.roles" .) }}
{{- $v := index $.Values $role }}
{{- $mine := dict }}
{{- range $kind, $port := $v.ports }}
{{- $key := toString (int $port) }}
{{- if hasKey $mine $key }}
{{- fail (printf "kvcast: %s.ports.%s and %s.ports.%s are both %s; a pod's ports must differ" $role $kind $role (get $mine $key) $key) }}
{{- end }}
{{- $_ := set $mine $key $kind }}
{{- if and $.Values.hostNetwork (hasKey $seen $key) }}
{{- fail (printf "kvcast: hostNetwork is on, and %s.ports.%s and %s are both %s; pods of different roles share a node's ports, so every port must differ" $role $kind (get $seen $key) $key) }}
{{- end }}
{{- $_ := set $seen $key (printf "%s.ports.%s" $role $kind) }}
{{- end }}
{{- if and (ne $role "relay") $v.kvDiskTier (gt (int $v.kvDiskTier.mb) 0) (eq (int ($v.kvHostTierMB | default 0)) 0) }}
{{- fail (printf "kvcast: %s.kvDiskTier.mb needs %s.kvHostTierMB > 0: the disk tier holds what the host tier pushes out" $role $role) }}
{{- end }}
{{- $a := $v.autoscaling }}
{{- if and $a.enabled (eq $a.metric "planner") (not (has $role (list "prefill" "decode"))) }}
{{- fail (printf "kvcast: %s.autoscaling.metric planner: the planner sizes prefill and decode only" $role) }}
{{- end }}
{{- if and $a.enabled (eq ($a.engine | default "hpa") "keda") (ne $a.metric "planner") }}
{{- fail (printf "kvcast: %s.autoscaling.engine keda scales on the planner's metric: set %s.autoscaling.metric planner" $role $role) }}
{{- end }}
{{- if and $a.enabled (eq ($a.engine | default "hpa") "keda") (not $a.keda) }}
{{- fail (printf "kvcast: %s.autoscaling.engine keda needs %s.autoscaling.keda.prometheusAddress" $role $role) }}
{{- end }}
{{- if and $a.enabled (gt (int $a.minReplicas) (int $a.maxReplicas)) }}
{{- fail (printf "kvcast: %s.autoscaling.minReplicas (%d) is greater than maxReplicas (%d)" $role (int $a.minReplicas) (int $a.maxReplicas)) }}
{{- end }}
{{- end }}
{{- end }}

package kubernetes

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// objectMetaOf is what the exporter reads of m, for the kubelet Pods API
// source, which decodes its pods with k8s.io/api (podsapi.go). The API
// server source reads its own JSON (decodeObjectMeta).
func objectMetaOf(m *metav1.ObjectMeta) *objectMeta {
	owners := make([]Owner, 0, len(m.OwnerReferences))
	for _, o := range m.OwnerReferences {
		owners = append(owners, Owner{
			APIVersion: o.APIVersion,
			Kind:       o.Kind,
			Name:       o.Name,
			Controller: o.Controller != nil && *o.Controller,
		})
	}
	return &objectMeta{
		Namespace: m.Namespace, Name: m.Name, UID: string(m.UID),
		Labels: m.Labels, Annotations: m.Annotations,
		Owners: owners, Created: m.CreationTimestamp.Time,
	}
}

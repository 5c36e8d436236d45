// Package helm holds the tests of outboxd's Helm chart (deploy/helm/outboxd):
// helm lint, helm template for several value sets, every rendered object
// decoded strictly into its Kubernetes API type, and what the pods must
// be (locked down, probed, wired to the replicas). It is a module of its
// own so that Helm and the Kubernetes modules stay out of the product's
// go.mod.
package helm

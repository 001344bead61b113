// Command cilium-crds prints the CustomResourceDefinitions that cilium-operator registers, made by
// Cilium's own code at the version this module requires: it calls
// github.com/cilium/cilium/pkg/k8s/apis/cilium.io/client.CreateCustomResourceDefinitions (the
// function the operator runs at start, through RegisterCRDs) against an in-memory apiextensions
// clientset, then prints what that call created as one JSON List. The rehearsal applies that List to
// its real kube-apiserver, so Cilium objects the platform renders are validated by Cilium's schema.
//
// Which CRDs are made follows option.Config, the agent/operator configuration, left at Cilium's
// defaults here (CiliumNetworkPolicy and CiliumClusterwideNetworkPolicy on, BGP off, ...).
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sort"

	"github.com/cilium/cilium/pkg/k8s/apis/cilium.io/client"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset/fake"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
)

func main() {
	if err := run(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "cilium-crds:", err)
		os.Exit(1)
	}
}

func run(out io.Writer) error {
	cs := fake.NewSimpleClientset()
	crds := apiextensionsv1.SchemeGroupVersion.WithResource("customresourcedefinitions")
	// The operator waits until the API server reports each CRD Established; the in-memory clientset
	// has no API server, so a create is answered as one that was accepted and established.
	cs.PrependReactor("create", "customresourcedefinitions", func(action k8stesting.Action) (bool, runtime.Object, error) {
		crd := action.(k8stesting.CreateAction).GetObject().(*apiextensionsv1.CustomResourceDefinition).DeepCopy()
		crd.Status.Conditions = []apiextensionsv1.CustomResourceDefinitionCondition{
			{Type: apiextensionsv1.NamesAccepted, Status: apiextensionsv1.ConditionTrue},
			{Type: apiextensionsv1.Established, Status: apiextensionsv1.ConditionTrue},
		}
		return true, crd, cs.Tracker().Create(crds, crd, "")
	})
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if err := client.CreateCustomResourceDefinitions(logger, cs); err != nil {
		return err
	}
	objs, err := cs.Tracker().List(crds, apiextensionsv1.SchemeGroupVersion.WithKind("CustomResourceDefinition"), "")
	if err != nil {
		return err
	}
	list := objs.(*apiextensionsv1.CustomResourceDefinitionList)
	items := make([]apiextensionsv1.CustomResourceDefinition, 0, len(list.Items))
	for _, crd := range list.Items {
		crd.TypeMeta.APIVersion = apiextensionsv1.SchemeGroupVersion.String()
		crd.TypeMeta.Kind = "CustomResourceDefinition"
		crd.Status = apiextensionsv1.CustomResourceDefinitionStatus{}
		crd.ObjectMeta.ResourceVersion = ""
		items = append(items, crd)
	}
	sort.Slice(items, func(i, j int) bool { return items[i].Name < items[j].Name })
	enc := json.NewEncoder(out)
	enc.SetIndent("", " ")
	return enc.Encode(map[string]any{"apiVersion": "v1", "kind": "List", "items": items})
}

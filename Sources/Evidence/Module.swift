// Evidence bundles: what this host measures, the signed statement (DSSE, in-toto), its
// verification, and the OCSF events.

//! The configuration generation an agent reports back once it applied a rendering (shared by
//! the reconcile tests and the reconcile benchmark).

use serde::Deserialize;
use warren_types::reconcile::CONFIG_GENERATION_ANNOTATION;

/// The generation annotation of the Deployment in `config` (a multi-document YAML stream).
pub fn generation_of(config: &str) -> String {
    for doc in serde_yaml::Deserializer::from_str(config) {
        let object = serde_json::Value::deserialize(doc).expect("the config is YAML");
        if object["kind"] == "Deployment" {
            return object["metadata"]["annotations"][CONFIG_GENERATION_ANNOTATION]
                .as_str()
                .expect("the Deployment carries its generation")
                .to_owned();
        }
    }
    panic!("no Deployment in {config}");
}

//! Loading: what the build asks for is what [`expected_tensors`] lists; a saved model loads
//! back with the same outputs; a bad checkpoint is reported whole, in one error.

use std::collections::{BTreeMap, HashMap};

use candle_core::{DType, Device, Tensor};
use candle_nn::{VarBuilder, VarMap};
use test_support::Scratch;

use super::{classifier, max_diff, random, tiny, KINDS};
use crate::error::{ModelError, WeightProblem};
use crate::mode::Mode;
use crate::vision::config::PositionKind;
use crate::vision::error::VisionError;
use crate::vision::load::VisionModelDir;
use crate::vision::model::{VisionForImageClassification, VisionModel};
use crate::vision::save::save_pretrained;
use crate::vision::tensors::{expected_tensors, VisionKind};

fn scratch(name: &str) -> Scratch {
    Scratch::new("roformer-vision-load", name)
}

#[test]
fn vision_expected_tensors_are_what_the_build_asks_for() {
    for kind in KINDS {
        for extra in [
            "",
            r#""use_gated_mlp": true, "mlp_bias": false, "query_bias": false, "num_register_tokens": 0"#,
        ] {
            let cfg = tiny(kind, extra);
            let varmap = VarMap::new();
            let vb = VarBuilder::from_varmap(&varmap, DType::F32, &Device::Cpu);
            VisionForImageClassification::load(vb, &cfg).unwrap();
            let built: BTreeMap<String, Vec<usize>> = varmap
                .data()
                .lock()
                .unwrap()
                .iter()
                .map(|(n, v)| (n.clone(), v.dims().to_vec()))
                .collect();
            let listed: BTreeMap<String, Vec<usize>> =
                expected_tensors(&cfg, VisionKind::ImageClassification)
                    .into_iter()
                    .map(|t| (t.name, t.shape))
                    .collect();
            assert_eq!(built, listed, "{kind} {extra}");
        }
    }
}

#[test]
fn vision_saved_models_load_back_with_the_same_outputs() {
    let x = random(&[1, 2, 9, 14], 3);
    for kind in KINDS {
        let cfg = tiny(kind, r#""id2label": {"0": "a", "1": "b", "2": "c"}"#);
        let (model, varmap) = classifier(&cfg, DType::F32, 5);
        let dir = scratch(&format!("saved-{kind}"));
        save_pretrained(&dir, &cfg, VisionKind::ImageClassification, &varmap).unwrap();
        let opened = VisionModelDir::open(&dir).unwrap();
        assert_eq!(opened.config, cfg);
        assert!(opened.has_classifier());
        let loaded = opened.load_classifier(DType::F32, &Device::Cpu).unwrap();
        // The mask token written for transformers is the only tensor left unread.
        assert_eq!(
            loaded.unused,
            vec!["dinov3_vit.embeddings.mask_token".to_string()]
        );
        let want = model.forward(&x, model.plan(Mode::Inference)).unwrap();
        let got = loaded
            .model
            .forward(&x, loaded.model.plan(Mode::Inference))
            .unwrap();
        assert_eq!(max_diff(&want, &got), 0.0, "{kind}");
        // The backbone alone loads from the classifier's file; the head is merely unused.
        let backbone = opened.load_model(DType::F32, &Device::Cpu).unwrap();
        assert!(backbone.unused.iter().any(|n| n == "classifier.weight"));
        let a = backbone
            .model
            .forward(&x, backbone.model.plan(Mode::Inference))
            .unwrap();
        let b = model
            .model()
            .forward(&x, model.plan(Mode::Inference))
            .unwrap();
        assert_eq!(max_diff(&a.pooler_output, &b.pooler_output), 0.0);
    }
}

/// A checkpoint missing a tensor, holding one the config does not use, and one of the wrong
/// shape: all three in one error, nothing built.
#[test]
fn vision_bad_checkpoints_name_every_problem_at_once() {
    let cfg = tiny(PositionKind::RopeAxial, "");
    let varmap = VarMap::new();
    crate::vision::init::initialise(
        &varmap,
        &cfg,
        VisionKind::Model,
        1,
        DType::F32,
        &Device::Cpu,
    )
    .unwrap();
    let dir = scratch("bad");
    save_pretrained(&dir, &cfg, VisionKind::Model, &varmap).unwrap();
    let weights = dir.join("model.safetensors");
    let mut tensors: HashMap<String, Tensor> =
        candle_core::safetensors::load(&weights, &Device::Cpu).unwrap();
    tensors.remove("layer.1.mlp.up_proj.bias");
    tensors.insert(
        "layer.0.attention.o_proj.lora".into(),
        Tensor::zeros(4, DType::F32, &Device::Cpu).unwrap(),
    );
    tensors.insert(
        "layer.0.norm2.weight".into(),
        Tensor::ones(15, DType::F32, &Device::Cpu).unwrap(),
    );
    tensors.insert(
        "embeddings.mask_token".into(),
        Tensor::zeros((1, 2, 16), DType::F32, &Device::Cpu).unwrap(),
    );
    candle_core::safetensors::save(&tensors, &weights).unwrap();
    let err = VisionModelDir::open(&dir)
        .unwrap()
        .load_model(DType::F32, &Device::Cpu)
        .unwrap_err();
    let VisionError::Model(ModelError::Weights { problems, .. }) = &err else {
        panic!("{err}");
    };
    let p = &problems.0;
    assert!(
        p.contains(&WeightProblem::Missing {
            name: "layer.1.mlp.up_proj.bias".into(),
            expected: vec![24]
        }),
        "{err}"
    );
    assert!(
        p.contains(&WeightProblem::Unexpected {
            name: "layer.0.attention.o_proj.lora".into(),
            found: vec![4]
        }),
        "{err}"
    );
    assert!(
        p.contains(&WeightProblem::Shape {
            name: "layer.0.norm2.weight".into(),
            expected: vec![16],
            found: vec![15]
        }),
        "{err}"
    );
    assert!(
        p.contains(&WeightProblem::Shape {
            name: "embeddings.mask_token".into(),
            expected: vec![1, 1, 16],
            found: vec![1, 2, 16]
        }),
        "{err}"
    );
    assert_eq!(p.len(), 4, "{err}");

    // A config asking for more layers than the file holds, or turning a bias off.
    let more = tiny(PositionKind::RopeAxial, r#""num_hidden_layers": 5"#);
    let (_, problems) = crate::vision::tensors::check(
        &more,
        VisionKind::Model,
        &VisionModelDir::open(&dir).unwrap().checkpoint,
    );
    assert!(problems.contains(&WeightProblem::LayerCount {
        expected: 5,
        found: 2
    }));
    let dir = scratch("bias");
    save_pretrained(&dir, &cfg, VisionKind::Model, &varmap).unwrap();
    let off = tiny(PositionKind::RopeAxial, r#""key_bias": false"#);
    std::fs::write(
        dir.join("config.json"),
        serde_json::to_string(&off.to_raw("DINOv3ViTModel")).unwrap(),
    )
    .unwrap();
    let err = VisionModelDir::open(&dir)
        .unwrap()
        .load_model(DType::F32, &Device::Cpu)
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("unexpected tensor layer.0.attention.k_proj.bias"),
        "{err}"
    );
}

#[test]
fn vision_a_directory_without_files_is_a_clear_error() {
    let dir = scratch("empty");
    let err = VisionModelDir::open(&dir).unwrap_err();
    assert!(err.to_string().contains("config.json"), "{err}");
    // A model from memory: the bytes of a saved directory.
    let cfg = tiny(PositionKind::None, "");
    let varmap = VarMap::new();
    crate::vision::init::initialise(
        &varmap,
        &cfg,
        VisionKind::Model,
        1,
        DType::F32,
        &Device::Cpu,
    )
    .unwrap();
    let files = crate::vision::save::model_files(&cfg, VisionKind::Model, &varmap).unwrap();
    let config = String::from_utf8(files[0].1.clone()).unwrap();
    let dir = VisionModelDir::from_memory("built-in".into(), &config, files[1].1.clone()).unwrap();
    let model: VisionModel = dir.load_model(DType::F32, &Device::Cpu).unwrap().model;
    assert_eq!(model.config(), &cfg);
}

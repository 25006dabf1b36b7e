//! Names by meaning: which metric a log's key stands for, whatever the trainer called it
//! (`total_loss`, `lm loss`, `train/loss` → loss; `learning_rate`, `lr/pg1`, `train/lr` → lr;
//! `gnorm`, `grad-norm` → grad_norm; `val_loss`, `eval/loss`, `validation loss` → eval
//! loss; ...). Names compare case-blind with ` `, `-` and `_` alike; a nested key (`/` or `.`)
//! is read by its last segment, the segments before it saying train or eval. Pure.

/// What a key means.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Meaning {
    Step,
    Loss,
    Lr,
    GradNorm,
    TokensPerS,
    EvalLoss,
    /// An eval metric where higher is better (accuracy, top-1, mAP).
    EvalScore,
    Total,
    Tokens,
}

impl Meaning {
    /// The `[metrics]` key it fills.
    pub fn name(self) -> &'static str {
        match self {
            Meaning::Step => "step",
            Meaning::Loss => "loss",
            Meaning::Lr => "lr",
            Meaning::GradNorm => "grad_norm",
            Meaning::TokensPerS => "tokens_per_s",
            Meaning::EvalLoss => "eval_loss",
            Meaning::EvalScore => "eval_score",
            Meaning::Total => "total_steps",
            Meaning::Tokens => "tokens",
        }
    }
}

/// `key` lowercased, with ` ` and `-` as `_`.
fn norm(key: &str) -> String {
    key.trim()
        .chars()
        .map(|c| match c {
            ' ' | '-' => '_',
            c => c.to_ascii_lowercase(),
        })
        .collect()
}

const EVAL_WORDS: [&str; 5] = ["eval", "val", "valid", "validation", "dev"];

/// What `key` means and how sure (0 best): the most common spelling first, then the
/// others; `None` when it means none of roger's metrics.
pub fn meaning(key: &str) -> Option<(Meaning, u8)> {
    let full = norm(key);
    // Whole-name spellings with a `/` inside (`tok/s`) before the path is split.
    if matches!(
        full.as_str(),
        "tok/s" | "tokens/s" | "toks/s" | "tokens/sec"
    ) {
        return Some((Meaning::TokensPerS, 1));
    }
    let segs: Vec<&str> = full.split(['/', '.']).filter(|s| !s.is_empty()).collect();
    let (last, before) = segs.split_last()?;
    let eval_ctx = before.iter().any(|s| EVAL_WORDS.contains(s));
    let train_ctx = before.iter().any(|s| s.starts_with("train"));
    // `lr/pg1`, `lr/group_0`: a parameter group's lr; YOLO's pg0 is the bias group (it
    // warms *down*), so pg1 and pg2 come first.
    if before.first() == Some(&"lr") || before.first() == Some(&"learning_rate") {
        return Some((
            Meaning::Lr,
            match *last {
                "pg1" => 1,
                "pg2" => 2,
                _ => 3,
            },
        ));
    }
    let m = match *last {
        "global_step" => (Meaning::Step, 0),
        "step" => (Meaning::Step, 1),
        "iteration" | "iter" => (Meaning::Step, 2),
        "num_updates" | "update" | "updates" => (Meaning::Step, 3),
        "_step" | "steps" | "it" => (Meaning::Step, 4),
        "epoch" => (Meaning::Step, 9),
        "total_steps" | "max_steps" | "max_step" | "max_iter" | "max_iters" | "train_iters"
        | "max_update" | "num_training_steps" | "max_iteration" => (Meaning::Total, 0),
        "lr" | "learning_rate" | "learningrate" => (Meaning::Lr, 0),
        "cur_lr" | "current_lr" | "lr_0" => (Meaning::Lr, 1),
        l if l.starts_with("lr_") && l[3..].starts_with("pg") => (Meaning::Lr, 2),
        "grad_norm" | "gnorm" | "gradient_norm" | "global_grad_norm" | "grad_norm_total" => {
            (Meaning::GradNorm, 0)
        }
        "total_norm" | "grad_l2_norm" => (Meaning::GradNorm, 1),
        "norm" => (Meaning::GradNorm, 5),
        "loss" | "lm_loss" if eval_ctx => (Meaning::EvalLoss, 0),
        // Higher-is-better eval metrics: accuracy first, then detection's mAP (YOLO's
        // `metrics/mAP50-95(B)`, detectron2's `bbox/AP`), then F1.
        "accuracy" | "acc" | "top1" | "acc1" | "top_1" if eval_ctx => (Meaning::EvalScore, 0),
        "eval_accuracy"
        | "val_accuracy"
        | "val_acc"
        | "eval_acc"
        | "eval_top1"
        | "val_top1"
        | "eval_acc1"
        | "val_acc1"
        | "valid_acc"
        | "valid_accuracy"
        | "validation_accuracy"
        | "test_accuracy"
        | "test_acc" => (Meaning::EvalScore, 0),
        l if l.starts_with("map50_95") && before.first() == Some(&"metrics") => {
            (Meaning::EvalScore, 1)
        }
        "ap" if matches!(before.first(), Some(&"bbox") | Some(&"segm")) => (Meaning::EvalScore, 2),
        "f1" | "f1_score" if eval_ctx => (Meaning::EvalScore, 3),
        "eval_f1" | "val_f1" => (Meaning::EvalScore, 3),
        "loss" => (
            Meaning::Loss,
            if train_ctx || before.is_empty() { 0 } else { 3 },
        ),
        "total_loss" | "train_loss" | "training_loss" | "lm_loss" | "reduced_train_loss" => {
            (Meaning::Loss, 1)
        }
        "loss_step" | "train_loss_step" | "avg_loss" | "loss_avg" => (Meaning::Loss, 2),
        "eval_loss" | "val_loss" | "valid_loss" | "validation_loss" | "val_lm_loss"
        | "eval_lm_loss" | "validation_lm_loss" | "dev_loss" => (Meaning::EvalLoss, 0),
        "tokens_per_s"
        | "tokens_per_sec"
        | "tokens_per_second"
        | "tps"
        | "tok_per_sec"
        | "tokens_per_second_per_gpu"
        | "tok_s"
        | "toks_per_sec" => (Meaning::TokensPerS, 0),
        "num_input_tokens_seen" | "tokens_seen" | "total_tokens" | "consumed_tokens" => {
            (Meaning::Tokens, 0)
        }
        _ => return None,
    };
    Some(m)
}

/// Among `keys`, the one that best means `what` (ties: the first listed), with the words
/// that say why.
pub fn best(keys: &[String], what: Meaning) -> Option<(&str, String)> {
    let (key, _) = keys
        .iter()
        .filter_map(|k| meaning(k).filter(|(m, _)| *m == what).map(|(_, r)| (k, r)))
        .min_by_key(|(_, r)| *r)?;
    let segs: Vec<&str> = key.split(['/', '.']).collect();
    let what = what.name();
    let why = if segs.len() > 1 && !key.contains("tok/s") {
        format!(
            "by meaning: its last path segment {:?} reads as {what}",
            segs[segs.len() - 1]
        )
    } else {
        format!("by meaning: {key:?} reads as {what}")
    };
    Some((key.as_str(), why))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_by_meaning() {
        let of = |k: &str| meaning(k).map(|(m, _)| m);
        for k in [
            "loss",
            "total_loss",
            "train_loss",
            "lm loss",
            "train/loss",
            "Loss",
        ] {
            assert_eq!(of(k), Some(Meaning::Loss), "{k}");
        }
        for k in [
            "lr",
            "learning_rate",
            "lr/pg1",
            "train/learning_rate",
            "LR",
            "learning rate",
        ] {
            assert_eq!(of(k), Some(Meaning::Lr), "{k}");
        }
        for k in [
            "grad_norm",
            "gnorm",
            "grad-norm",
            "grad norm",
            "train/grad_norm",
        ] {
            assert_eq!(of(k), Some(Meaning::GradNorm), "{k}");
        }
        for k in [
            "val_loss",
            "eval_loss",
            "validation loss",
            "eval/loss",
            "val/lm loss",
        ] {
            assert_eq!(of(k), Some(Meaning::EvalLoss), "{k}");
        }
        for k in ["tokens_per_s", "tok/s", "train/tokens_per_second", "tps"] {
            assert_eq!(of(k), Some(Meaning::TokensPerS), "{k}");
        }
        for k in ["iter", "global_step", "step", "iteration", "num_updates"] {
            assert_eq!(of(k), Some(Meaning::Step), "{k}");
        }
        for k in [
            "base_lr",
            "loss_cls",
            "data_time",
            "eta",
            "memory",
            "acc",
            "lr_scale",
        ] {
            assert_eq!(of(k), None, "{k}");
        }
        assert_eq!(of("max_iter"), Some(Meaning::Total));
        for k in [
            "eval_top1",
            "val_accuracy",
            "eval/accuracy",
            "val/acc",
            "metrics/mAP50-95(B)",
            "bbox/AP",
            "eval_f1",
        ] {
            assert_eq!(of(k), Some(Meaning::EvalScore), "{k}");
        }
        // A train accuracy, mAP at one threshold and a per-class AP are not the eval score.
        for k in [
            "accuracy",
            "train/acc",
            "metrics/mAP50(B)",
            "bbox/AP-balloon",
        ] {
            assert_ne!(of(k), Some(Meaning::EvalScore), "{k}");
        }
    }

    #[test]
    fn the_best_key_and_why() {
        let keys: Vec<String> = ["lr/pg0", "lr/pg2", "lr/pg1", "train/box_loss"]
            .map(String::from)
            .to_vec();
        assert_eq!(best(&keys, Meaning::Lr).unwrap().0, "lr/pg1");
        assert_eq!(best(&keys, Meaning::Loss), None);
        let keys: Vec<String> = ["loss_cls", "total_loss", "iter", "epoch"]
            .map(String::from)
            .to_vec();
        assert_eq!(best(&keys, Meaning::Loss).unwrap().0, "total_loss");
        assert_eq!(best(&keys, Meaning::Step).unwrap().0, "iter");
        let keys: Vec<String> = ["train/learning_rate".to_string()].to_vec();
        let (k, why) = best(&keys, Meaning::Lr).unwrap();
        assert_eq!(k, "train/learning_rate");
        assert!(why.contains("\"learning_rate\""), "{why}");
    }
}

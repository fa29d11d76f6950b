//! Writes resource quantities the way the API server stores them ("4000m" → "4", "1024Mi" →
//! "1Gi"), so that applying the same objects again is a no-op: the API server compares the
//! applied value with the stored, canonical one, and a differently written but equal value
//! makes every server-side apply rewrite the object (seen on 1.20: a new resourceVersion each
//! time). Mirrors apimachinery's `Quantity` canonicalisation for the SI and binary suffixes;
//! values it cannot represent exactly (below a nano, exponent notation) are left as written.

use serde_json::Value;

const NANO: i128 = 1_000_000_000;
const DECIMAL: [(&str, i32); 10] = [
    ("n", -9),
    ("u", -6),
    ("m", -3),
    ("", 0),
    ("k", 3),
    ("M", 6),
    ("G", 9),
    ("T", 12),
    ("P", 15),
    ("E", 18),
];
const BINARY: [&str; 7] = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"];

/// The canonical spelling of `text`, or `None` when it is not a quantity this understands.
pub fn canonical(text: &str) -> Option<String> {
    let (negative, rest) = match text.as_bytes().first()? {
        b'-' => (true, &text[1..]),
        b'+' => (false, &text[1..]),
        _ => (false, text),
    };
    let number_len = rest
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(rest.len());
    let (number, suffix) = rest.split_at(number_len);
    let (int_part, frac_part) = number.split_once('.').unwrap_or((number, ""));
    if int_part.is_empty() && frac_part.is_empty() {
        return None;
    }
    let digits = format!("{int_part}{frac_part}");
    let mantissa: i128 = if digits.is_empty() {
        0
    } else {
        digits.parse().ok()?
    };
    let frac_len = u32::try_from(frac_part.len()).ok()?;
    let binary = BINARY.iter().position(|s| !s.is_empty() && *s == suffix);
    let nanos = if let Some(k) = binary {
        let scaled = mantissa
            .checked_mul(1024i128.checked_pow(u32::try_from(k).ok()?)?)?
            .checked_mul(NANO)?;
        exact_div(scaled, 10i128.checked_pow(frac_len)?)?
    } else {
        let (_, exp) = DECIMAL.iter().find(|(s, _)| *s == suffix)?;
        let shift = exp + 9 - i32::try_from(frac_len).ok()?;
        if shift >= 0 {
            mantissa.checked_mul(10i128.checked_pow(shift.unsigned_abs())?)?
        } else {
            exact_div(mantissa, 10i128.checked_pow(shift.unsigned_abs())?)?
        }
    };
    let sign = if negative && nanos != 0 { "-" } else { "" };
    // Binary values stay binary unless small or fractional (apimachinery switches those).
    if binary.is_some() && nanos % NANO == 0 && nanos / NANO >= 1024 {
        let bytes = nanos / NANO;
        let k = (0..BINARY.len())
            .rev()
            .find(|k| bytes % 1024i128.pow(*k as u32) == 0)
            .unwrap_or(0);
        return Some(format!(
            "{sign}{}{}",
            bytes / 1024i128.pow(k as u32),
            BINARY[k]
        ));
    }
    if nanos == 0 {
        return Some("0".into());
    }
    let (suffix, exp) = DECIMAL
        .iter()
        .rev()
        .find(|(_, exp)| nanos % 10i128.pow((exp + 9) as u32) == 0)?;
    Some(format!(
        "{sign}{}{suffix}",
        nanos / 10i128.pow((exp + 9) as u32)
    ))
}

fn exact_div(value: i128, divisor: i128) -> Option<i128> {
    (value % divisor == 0).then(|| value / divisor)
}

/// Rewrites every quantity string in a map (e.g. `limits`) to its canonical spelling.
fn canonicalise_map(map: Option<&mut Value>) {
    let Some(map) = map.and_then(Value::as_object_mut) else {
        return;
    };
    for value in map.values_mut() {
        if let Some(canonical) = value.as_str().and_then(canonical) {
            *value = Value::String(canonical);
        }
    }
}

fn canonicalise_resources(resources: Option<&mut Value>) {
    if let Some(resources) = resources {
        canonicalise_map(resources.get_mut("limits"));
        canonicalise_map(resources.get_mut("requests"));
    }
}

/// Canonicalises the quantities of the kinds Warren renders, in place.
pub fn canonicalise(kind: &str, object: &mut Value) {
    match kind {
        "Deployment" => {
            let Some(pod) = object.pointer_mut("/spec/template/spec") else {
                return;
            };
            for list in ["containers", "initContainers"] {
                if let Some(containers) = pod.get_mut(list).and_then(Value::as_array_mut) {
                    for container in containers {
                        canonicalise_resources(container.get_mut("resources"));
                    }
                }
            }
            if let Some(volumes) = pod.get_mut("volumes").and_then(Value::as_array_mut) {
                for volume in volumes {
                    let Some(limit) = volume.pointer_mut("/emptyDir/sizeLimit") else {
                        continue;
                    };
                    if let Some(canonical) = limit.as_str().and_then(canonical) {
                        *limit = Value::String(canonical);
                    }
                }
            }
        }
        "PersistentVolumeClaim" => canonicalise_resources(object.pointer_mut("/spec/resources")),
        "ResourceQuota" => canonicalise_map(object.pointer_mut("/spec/hard")),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_apimachinery() {
        let cases = [
            ("4000m", "4"),
            ("1000m", "1"),
            ("1500m", "1500m"),
            ("0.5", "500m"),
            ("100m", "100m"),
            ("1", "1"),
            ("6G", "6G"),
            ("1000M", "1G"),
            ("1500M", "1500M"),
            ("1024Mi", "1Gi"),
            ("1536Mi", "1536Mi"),
            ("1.5Gi", "1536Mi"),
            ("20Gi", "20Gi"),
            ("512Ki", "512Ki"),
            ("1Ki", "1Ki"),
            ("0.5Ki", "512"),
            ("0", "0"),
            ("0Gi", "0"),
            ("1e3", "1e3"),
            ("1.5", "1500m"),
            ("2048", "2048"),
            ("+3", "3"),
            ("-1000m", "-1"),
        ];
        for (input, want) in cases {
            let got = canonical(input).unwrap_or_else(|| input.to_owned());
            assert_eq!(got, want, "{input}");
        }
        assert_eq!(canonical("abc"), None);
        assert_eq!(canonical("1Zi"), None);
        assert_eq!(canonical("."), None);
        assert_eq!(canonical("0.1n"), None);
    }

    #[test]
    fn rewrites_deployment_pvc_and_quota() {
        let mut d = serde_json::json!({"spec": {"template": {"spec": {
            "containers": [{"resources": {"limits": {"cpu": "4000m", "memory": "1024Mi"}}}],
            "initContainers": [{"resources": {"requests": {"cpu": "0.5"}}}],
            "volumes": [{"emptyDir": {"sizeLimit": "2048Mi"}}]}}}});
        canonicalise("Deployment", &mut d);
        let pod = &d["spec"]["template"]["spec"];
        assert_eq!(pod["containers"][0]["resources"]["limits"]["cpu"], "4");
        assert_eq!(pod["containers"][0]["resources"]["limits"]["memory"], "1Gi");
        assert_eq!(
            pod["initContainers"][0]["resources"]["requests"]["cpu"],
            "500m"
        );
        assert_eq!(pod["volumes"][0]["emptyDir"]["sizeLimit"], "2Gi");
        let mut q = serde_json::json!({"spec": {"hard": {"limits.cpu": "8000m"}}});
        canonicalise("ResourceQuota", &mut q);
        assert_eq!(q["spec"]["hard"]["limits.cpu"], "8");
        let mut p =
            serde_json::json!({"spec": {"resources": {"requests": {"storage": "20480Mi"}}}});
        canonicalise("PersistentVolumeClaim", &mut p);
        assert_eq!(p["spec"]["resources"]["requests"]["storage"], "20Gi");
    }
}

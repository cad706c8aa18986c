//! How a command's error reaches the terminal: one line, the outermost message with its
//! causes, except that input refused for several problems lists them one per line, so that
//! each problem's own "; did you mean" or "; fix:" is not lost among the others.

use std::error::Error;
use std::fmt::Write;

use ferry_spec::SpecError;

use crate::client::Refusal;

/// What `ferry` prints after `error: ` for `e`.
pub fn report(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for (i, cause) in e.chain().enumerate() {
        if i > 0 {
            out.push_str(": ");
        }
        if let Some(list) = problem_list(cause) {
            out.push_str(&list);
            return out;
        }
        out.push_str(&cause.to_string().replace('\n', " "));
    }
    out
}

/// `e`'s problems one per line under a line saying how many, when it is refused input with
/// more than one problem.
fn problem_list(e: &(dyn Error + 'static)) -> Option<String> {
    let (whose, lines) = if let Some(spec) = e.downcast_ref::<SpecError>() {
        spec_lines(spec)?
    } else {
        let refusal = e.downcast_ref::<Refusal>()?;
        let source = refusal.source.as_deref().unwrap_or("the request");
        (Whose::Source(source.to_owned()), refusal.problems.clone())
    };
    if lines.len() < 2 {
        return None;
    }
    let mut out = match whose {
        Whose::Source(source) => format!("{source}: {} problems", lines.len()),
        Whose::Documents(n) => format!("{} problems in {n} documents", lines.len()),
    };
    for line in lines {
        let _ = write!(out, "\n  {}", line.replace('\n', " "));
    }
    Some(out)
}

/// Whose problems a list is.
enum Whose {
    /// One input's, by its name.
    Source(String),
    /// This many documents', each line naming its own.
    Documents(usize),
}

/// Whose input `e` refuses and each problem as a line: a single document's field problems
/// under its name; several documents' under their count, each line naming its document.
fn spec_lines(e: &SpecError) -> Option<(Whose, Vec<String>)> {
    match e {
        SpecError::Syntax { .. } => None,
        SpecError::Invalid {
            source_name,
            problems,
        } => Some((
            Whose::Source(source_name.clone()),
            problems.iter().map(ToString::to_string).collect(),
        )),
        SpecError::Documents(errors) => {
            let lines = errors
                .iter()
                .flat_map(|e| match e {
                    SpecError::Invalid {
                        source_name,
                        problems,
                    } => problems
                        .iter()
                        .map(|p| format!("{source_name}: {p}"))
                        .collect(),
                    other => vec![other.to_string()],
                })
                .collect();
            Some((Whose::Documents(errors.len()), lines))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_problem_stays_on_one_line_and_several_are_listed() {
        let one = ferry_spec::parse_documents(
            "apiVersion: ferry.dev/v1alpha1\nkind: Queue\nmetadata: {name: A}\n\
             spec: {quotas: [{flavor: any, nominal: 1}]}\n",
            "q.yaml",
        )
        .unwrap_err();
        let said = report(&anyhow::Error::from(one));
        assert!(
            !said.contains('\n') && said.starts_with("q.yaml: metadata.name"),
            "{said}"
        );

        let two = ferry_spec::parse_documents(
            "apiVersion: ferry.dev/v1alpha1\nkind: Queue\nmetadata: {name: A}\n\
             spec: {quotas: [{flavor: any, nominal: 1}], cohortt: x}\n",
            "q.yaml",
        )
        .unwrap_err();
        let said = report(&anyhow::Error::from(two).context("cannot apply"));
        let lines: Vec<&str> = said.lines().collect();
        assert_eq!(lines[0], "cannot apply: q.yaml: 2 problems", "{said}");
        assert!(
            lines[1..].iter().all(|l| l.starts_with("  ")) && lines.len() == 3,
            "{said}"
        );
        assert!(said.contains("did you mean `cohort`?"), "{said}");

        let docs = ferry_spec::parse_documents(
            "apiVersion: ferry.dev/v1alpha1\nkind: Queue\nmetadata: {name: A}\n\
             spec: {quotas: [{flavor: any, nominal: 1}]}\n---\n\
             apiVersion: ferry.dev/v1alpha1\nkind: Queue\nmetadata: {name: b}\n\
             spec: {quotas: [{flavor: any, nominal: -1}]}\n",
            "q.yaml",
        )
        .unwrap_err();
        let said = report(&anyhow::Error::from(docs));
        assert!(
            said.starts_with("2 problems in 2 documents\n  q.yaml (document 1): "),
            "{said}"
        );
        assert!(
            said.contains("\n  q.yaml (document 2): spec.quotas"),
            "{said}"
        );

        let refused = Refusal {
            message: "f.yaml: a: x; b: y".into(),
            source: Some("f.yaml".into()),
            problems: vec!["a: x".into(), "b: y".into()],
        };
        assert_eq!(
            report(&anyhow::Error::new(refused)),
            "f.yaml: 2 problems\n  a: x\n  b: y"
        );
    }
}

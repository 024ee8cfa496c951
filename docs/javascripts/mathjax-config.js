// MathJax 3 for pymdownx.arithmatex (generic mode): only the elements arithmatex marks are
// typeset. The script itself is copied into the site at build time (scripts/docs/gen_mathjax.py).
window.MathJax = {
  tex: {
    inlineMath: [["\\(", "\\)"]],
    displayMath: [["\\[", "\\]"]],
    processEscapes: true,
    processEnvironments: true,
  },
  svg: { fontCache: "global" },
  options: {
    ignoreHtmlClass: ".*|",
    processHtmlClass: "arithmatex",
  },
};

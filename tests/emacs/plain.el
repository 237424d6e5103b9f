;;; plain.el --- helpers for tests/test_plain_clients.py: stock eglot in batch Emacs  -*- lexical-binding: t -*-
;; Debian's emacs-nox and elpa-eglot (1.9), nothing else. The scenario runs in `oi-test-run';
;; what it returns, the prompts eglot showed and the echo-area messages go to $OI_TEST_OUT.
(require 'eglot)
(require 'json)
(require 'cl-lib)
(require 'python)

(defvar oi-test-prompts nil "Every completing-read eglot did: (PROMPT CHOICES), newest first.")
(defvar oi-test-pick nil "Alist: regexp matching a prompt -> substring of the choice to make.")
(defvar oi-test-server nil)

;; What a person answers in the minibuffer: eglot asks code actions and showMessageRequest
;; with completing-read.
(defun oi-test--completing-read (prompt collection &rest _)
  (let* ((choices (mapcar (lambda (c) (if (consp c) (car c) c))
                          (if (functionp collection) (all-completions "" collection)
                            collection)))
         (want (cl-loop for (re . sub) in oi-test-pick
                        when (string-match-p re prompt) return sub))
         (choice (if want (cl-find-if (lambda (c) (string-match-p (regexp-quote want) c))
                                      choices)
                   (car choices))))
    (push (list prompt choices) oi-test-prompts)
    choice))
(advice-add 'completing-read :override #'oi-test--completing-read)

(defun oi-test-start (options &optional file)
  "Visit FILE (calc.py) and connect oi-lsp to it with eglot, as the README says."
  (find-file (expand-file-name (or file "calc.py") default-directory))
  (let ((eglot-sync-connect t))
    (setq oi-test-server
          (eglot '(python-mode) (cons 'transient default-directory) 'eglot-lsp-server
                 (list (getenv "OI_LSP") :initializationOptions options) "python")))
  oi-test-server)

(defun oi-test-messages ()
  (with-current-buffer (messages-buffer) (buffer-string)))

(defun oi-test-wait (pred what &optional seconds)
  "Let eglot work (process output, timers) until PRED holds; fail after SECONDS."
  (let ((deadline (+ (float-time) (or seconds 60))))
    (while (not (funcall pred))
      (when (> (float-time) deadline) (error "timed out waiting for %s" what))
      (accept-process-output nil 0.05))))

(defun oi-test-run (fn)
  (let (ok result err)
    (condition-case e
        (progn (setq result (funcall fn)) (setq ok t))
      (error (setq err (format "%S" e))))
    (with-temp-file (getenv "OI_TEST_OUT")
      (insert (json-encode `((ok . ,(if ok t :json-false)) (error . ,err)
                             (result . ,result)
                             (prompts . ,(vconcat (mapcar (lambda (p) (vector (car p) (vconcat (cadr p))))
                                                          (reverse oi-test-prompts))))
                             (messages . ,(oi-test-messages))))))
    (when oi-test-server
      (ignore-errors (eglot-shutdown oi-test-server nil 10)))
    (kill-emacs (if ok 0 1))))
